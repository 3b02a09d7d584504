// Draft tokens for speculative decoding by prompt lookup (vLLM's `ngram` method, llama.cpp's lookup decoding): the
// tokens that followed the latest earlier occurrence of the sequence's own last n tokens, for the longest n in
// [min_n, max_n] that occurred before. No draft model: text that repeats its prompt or itself (code edits,
// summaries, extraction, JSON, loops) is drafted, other text gets no drafts and decodes as before.
//
// Contract: pure, one per sequence, fed the sequence's tokens as they grow (a sequence's tokens only ever grow at
// the end: the caller passes the same list each time, longer). Indexing is incremental: each token is hashed into
// the index once per n, so a proposal costs O(max_n - min_n + 1) lookups however long the sequence is (the first
// one indexes the prompt). A match is checked token by token (no hash collision makes a draft). When the match
// ends less than `max_drafts` tokens before the end, the drafts go on repeating with that period (a loop of
// period d predicts itself: draft j is the token d before it).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace actord {

class NgramDrafter {
 public:
  NgramDrafter(int min_n, int max_n);

  // Up to max_drafts tokens to follow `tokens` into `out` (cleared first; empty: no match).
  void propose(std::span<const int32_t> tokens, int max_drafts, std::vector<int32_t>& out);

 private:
  // Indexes every n-gram that ends before position `end` (the position of the token that followed it).
  void index_until(std::span<const int32_t> tokens, size_t end);
  static uint64_t hash(std::span<const int32_t> gram);

  // Hash of an n-gram (n in the key) -> the position after its latest occurrence: open addressing, linear probing,
  // at most half full (no allocation per token: the scheduler proposes for every drafting sequence every step).
  class Index {
   public:
    void put(uint64_t key, uint32_t value);
    const uint32_t* find(uint64_t key) const;

   private:
    struct Slot {
      uint64_t key = 0;  // 0: empty (keys are never 0)
      uint32_t value = 0;
    };
    std::vector<Slot> slots_;
    size_t used_ = 0;
  };

  int min_n_, max_n_;
  size_t indexed_ = 0;  // n-grams followed by tokens[i] for every i < indexed_ are in the index
  Index latest_;
};

}  // namespace actord
