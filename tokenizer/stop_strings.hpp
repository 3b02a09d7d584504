// Stop strings on a stream of text deltas: generation ends at the first occurrence of any stop string, even when it
// spans several tokens, and the stop string itself is never emitted.
//
// Contract: push(delta) returns the text that is safe to emit now: it holds back any tail that could still grow
// into a stop string. Once a stop string has appeared, stopped() is true, push() returns the text before it and
// then nothing. finish() returns what was held back when the sequence ends without a stop. One per sequence.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace actord {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);

  std::string push(std::string_view delta);
  std::string finish();
  bool stopped() const { return stopped_; }
  bool empty() const { return stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // text not yet emitted: a possible start of a stop string
  bool stopped_ = false;
};

}  // namespace actord
