// The brute force that token masks are checked against: every token of the vocabulary fed whole to a copy of the
// matcher (JsonMatcher, RegexMatcher, OutputMatcher), the stop id allowed exactly where the matcher is complete.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "structured/token_mask.hpp"

namespace actord::test {

// Checks `bits` against the brute force for every id of `vocab`; returns how many ids it allows.
template <class Matcher>
int check_mask_by_brute_force(const std::vector<uint64_t>& bits, const Matcher& m,
                              const structured::TokenVocabulary& vocab, int32_t stop_id) {
  int count = 0;
  for (int32_t id = 0; id < vocab.size(); ++id) {
    bool takes = false;
    const std::string& b = vocab.bytes[static_cast<size_t>(id)];
    if (!b.empty()) {
      Matcher copy = m;
      size_t i = 0;
      while (i < b.size() && copy.feed(static_cast<uint8_t>(b[i]))) ++i;
      takes = i == b.size();
    }
    if (id == stop_id) takes = m.complete();
    INFO("token " << id);
    CHECK(structured::allowed(bits, id) == takes);
    count += takes;
  }
  return count;
}

}  // namespace actord::test
