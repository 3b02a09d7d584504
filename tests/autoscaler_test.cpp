// The autoscaler's decisions on scripted timelines of a group's load (scheduler/autoscaler.hpp): what one look
// wants, the scale-up and scale-down windows, bursts shorter than a window, a look after a resize starting the
// windows again, and a group outside its bounds asked back inside.
#include <catch2/catch.hpp>

#include "scheduler/autoscaler.hpp"

using namespace actord;
using namespace std::chrono_literals;

namespace {

AutoscaleSection settings(int min, int max, int target, std::chrono::milliseconds up, std::chrono::milliseconds down) {
  AutoscaleSection s;
  s.min_replicas = min;
  s.max_replicas = max;
  s.target_sequences = target;
  s.scale_up_after = up;
  s.scale_down_after = down;
  return s;
}

const Autoscaler::Time t0{};

}  // namespace

TEST_CASE("autoscaler - one look wants ceil(sequences / target) replicas within the bounds", "[autoscale]") {
  Autoscaler a(settings(1, 4, 8, 0ms, 0ms));
  CHECK(a.wanted(0) == 1);
  CHECK(a.wanted(8) == 1);
  CHECK(a.wanted(9) == 2);
  CHECK(a.wanted(24) == 3);
  CHECK(a.wanted(1000) == 4);
  CHECK(Autoscaler(settings(2, 4, 0, 0ms, 0ms)).wanted(1) == 2);  // target 0 taken as 1; min 2
}

TEST_CASE("autoscaler - more replicas once every look wanted more for scale_up_after, the fewest wanted over it",
          "[autoscale]") {
  Autoscaler a(settings(1, 4, 8, 2s, 60s));
  CHECK_FALSE(a.look(t0, 1, 30));         // wants 4
  CHECK_FALSE(a.look(t0 + 1s, 1, 12));    // wants 2
  CHECK(a.look(t0 + 2s, 1, 30) == 2);     // 2 s of wanting more: the fewest, 2
  // A look at the new size starts the window again.
  CHECK_FALSE(a.look(t0 + 3s, 2, 30));
  CHECK_FALSE(a.look(t0 + 4s, 2, 30));
  CHECK(a.look(t0 + 5s, 2, 30) == 4);
  // A burst shorter than the window adds nothing: a look that wants no more ends it.
  Autoscaler b(settings(1, 4, 8, 2s, 60s));
  CHECK_FALSE(b.look(t0, 1, 30));
  CHECK_FALSE(b.look(t0 + 1s, 1, 30));
  CHECK_FALSE(b.look(t0 + 1500ms, 1, 4));
  CHECK_FALSE(b.look(t0 + 2500ms, 1, 30));  // a new window from here
  CHECK(b.look(t0 + 4500ms, 1, 30) == 4);
  // scale_up_after 0: at the first look.
  Autoscaler c(settings(1, 3, 8, 0ms, 60s));
  CHECK(c.look(t0, 1, 17) == 3);
}

TEST_CASE("autoscaler - fewer replicas once every look wanted fewer for scale_down_after, the most wanted over it",
          "[autoscale]") {
  Autoscaler a(settings(1, 4, 8, 0ms, 10s));
  CHECK_FALSE(a.look(t0, 4, 0));        // wants 1
  CHECK_FALSE(a.look(t0 + 5s, 4, 20));  // wants 3
  CHECK_FALSE(a.look(t0 + 9s, 4, 1));
  CHECK(a.look(t0 + 10s, 4, 0) == 3);   // the most wanted over the window: 3
  CHECK_FALSE(a.look(t0 + 11s, 3, 0));
  CHECK_FALSE(a.look(t0 + 15s, 3, 24)); // wants 3 again: the window ends
  CHECK_FALSE(a.look(t0 + 16s, 3, 0));
  CHECK_FALSE(a.look(t0 + 25s, 3, 0));
  CHECK(a.look(t0 + 26s, 3, 0) == 1);
  // Holding steady asks nothing.
  for (int i = 0; i < 100; ++i) CHECK_FALSE(a.look(t0 + 30s + i * 1s, 1, 3));
}

TEST_CASE("autoscaler - a group outside its bounds is asked back inside at once", "[autoscale]") {
  Autoscaler a(settings(2, 3, 8, 60s, 60s));
  CHECK(a.look(t0, 1, 0) == 2);
  CHECK(a.look(t0, 5, 100) == 3);
  CHECK_FALSE(a.look(t0, 3, 100));
}

TEST_CASE("autoscaler - with target_prompt_tokens the group wants the larger of what its sequences and its prefill "
          "backlog ask", "[autoscale]") {
  AutoscaleSection s = settings(1, 4, 8, 1s, 5s);
  s.target_prompt_tokens = 1000;
  Autoscaler a(s);
  CHECK(a.wanted({0, 0}) == 1);
  CHECK(a.wanted({3, 2500}) == 3);   // few sequences, a long queue of prompts: a prefill group's load
  CHECK(a.wanted({20, 500}) == 3);   // many sequences, little to prefill: the sequences decide
  CHECK(a.wanted({1, 100000}) == 4); // within the bounds
  // Without it the backlog is no signal.
  CHECK(Autoscaler(settings(1, 4, 8, 0ms, 0ms)).wanted({3, 100000}) == 1);
  // Over time as with sequences alone: more once every look for scale_up_after wanted more, the fewest wanted.
  CHECK_FALSE(a.look(t0, 1, {2, 3500}));
  CHECK_FALSE(a.look(t0 + 500ms, 1, {2, 2100}));
  CHECK(a.look(t0 + 1s, 1, {2, 4000}) == 3);
  // The queue drained: fewer once every look for scale_down_after wanted fewer.
  CHECK_FALSE(a.look(t0 + 2s, 3, {2, 0}));
  CHECK_FALSE(a.look(t0 + 6s, 3, {2, 900}));
  CHECK(a.look(t0 + 7s, 3, {2, 0}) == 1);
}
