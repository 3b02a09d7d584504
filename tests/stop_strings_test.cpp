// Stop strings over streamed text deltas.
#include <catch2/catch.hpp>

#include "tokenizer/stop_strings.hpp"

using actord::StopStringMatcher;

namespace {

// Feeds deltas one by one; returns everything emitted.
std::string stream(StopStringMatcher& m, const std::vector<std::string>& deltas) {
  std::string out;
  for (const auto& d : deltas) out += m.push(d);
  return out + m.finish();
}

}  // namespace

TEST_CASE("a stop string spanning deltas ends the text before it", "[tokenizer][stop]") {
  StopStringMatcher m({"Lily."});
  CHECK(stream(m, {"named", " Li", "ly", ". She", " loved"}) == "named ");
  CHECK(m.stopped());
}

TEST_CASE("text that only looks like a stop string's start is released", "[tokenizer][stop]") {
  StopStringMatcher m({"\n\n"});
  std::string emitted = m.push("one\n");
  CHECK(emitted == "one");      // the newline might start the stop string
  emitted += m.push("two");     // it did not
  CHECK(emitted == "one\ntwo");
  CHECK(m.finish().empty());
  CHECK_FALSE(m.stopped());
}

TEST_CASE("the earliest of several stop strings wins - stops inside one delta", "[tokenizer][stop]") {
  StopStringMatcher m({"END", "ST"});
  CHECK(stream(m, {"a STOP and END"}) == "a ");
  StopStringMatcher none({});
  CHECK(stream(none, {"a", "b"}) == "ab");
  StopStringMatcher held({"xyz"});
  CHECK(stream(held, {"ab", "xy"}) == "abxy");  // held back, then released at the end
}
