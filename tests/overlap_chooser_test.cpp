// OverlapChooser (groups[].tbo: auto) driven by scripted step times: it tries both modes, keeps the faster one per
// size of step, probes the other now and then, and follows a change.
#include <catch2/catch.hpp>

#include "scheduler/overlap_chooser.hpp"

using namespace actord;

namespace {

// Runs `steps` steps of `tokens` tokens, each observed right away with the time `cost(split)` gives; the splits.
template <class Cost>
int run_steps(OverlapChooser& c, int steps, int64_t tokens, Cost&& cost) {
  int splits = 0;
  for (int i = 0; i < steps; ++i) {
    const bool split = c.choose_split(tokens);
    splits += split;
    c.observe(tokens, split, cost(split));
  }
  return splits;
}

}  // namespace

TEST_CASE("overlap chooser: warms up with both modes - then keeps the faster and probes the other every 16th step",
          "[scheduler][tbo]") {
  OverlapChooser c;
  // The first six choices alternate, split first.
  std::vector<bool> first;
  for (int i = 0; i < 6; ++i) {
    first.push_back(c.choose_split(128));
    c.observe(128, first.back(), first.back() ? 8000 : 10000);
  }
  CHECK(first == std::vector<bool>{true, false, true, false, true, false});
  // Split is faster: 160 more steps split but for the probes.
  const int splits = run_steps(c, 160, 128, [](bool split) { return split ? 8000u : 10000u; });
  CHECK(splits == 150);
  CHECK(c.per_token_us(128, true) == Approx(62.5));
  CHECK(c.per_token_us(128, false) == Approx(78.125));
}

TEST_CASE("overlap chooser: buckets by tokens keep their own choice - a change of costs is followed",
          "[scheduler][tbo]") {
  OverlapChooser c;
  // Small steps lose with the split (memory-bound: every micro-batch reads the weights), large ones gain.
  run_steps(c, 40, 32, [](bool split) { return split ? 1500u : 1100u; });
  run_steps(c, 40, 128, [](bool split) { return split ? 3200u : 3700u; });
  CHECK_FALSE(c.choose_split(32));
  CHECK_FALSE(c.choose_split(63));  // the same bucket
  CHECK(c.choose_split(128));
  CHECK(c.choose_split(255));
  // The link gets slower: splitting the small steps now pays; the probes see it within a few probes.
  const int splits = run_steps(c, 200, 40, [](bool split) { return split ? 1500u : 2400u; });
  CHECK(splits > 150);
  CHECK(c.choose_split(40));
}

TEST_CASE("overlap chooser: results that lag the choices (steps in flight) still warm both modes up", "[scheduler][tbo]") {
  OverlapChooser c;
  std::vector<bool> pending;
  int splits = 0;
  for (int i = 0; i < 100; ++i) {
    pending.push_back(c.choose_split(64));
    if (pending.size() > 2) {  // two steps ahead of their results
      c.observe(64, pending.front(), pending.front() ? 5000 : 4000);
      pending.erase(pending.begin());
    }
    splits += pending.back();
  }
  CHECK(splits < 15);
  CHECK(c.per_token_us(64, true) > c.per_token_us(64, false));
  CHECK(c.per_token_us(0, true) == 0);  // tokens below 1 are steps of 1; nothing seen there
}
