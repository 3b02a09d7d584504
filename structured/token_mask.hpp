// Which tokens may come next under a structured output's grammar (json_matcher.hpp, regex.hpp, grammar.hpp): a bit
// per token id.
//
// Contract: TokenVocabulary holds each id's bytes in the middle of a text (Tokenizer::token_bytes); special tokens
// and ids without a token have none and are never allowed by the grammar. allowed_tokens sets bit id % 64 of word
// id / 64 for every token whose bytes the matcher takes whole from its state (all its bytes: a token may end inside
// a UTF-8 character, the next one continues it), and for the stop ids once the object is complete. Cost: inside a
// string's text, a copy of the plain tokens' bits and a try of each other token; elsewhere a walk of the tokens'
// trie, one matcher copy per prefix the matcher takes (bench/json_mask_bench.cpp; the structured README).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "structured/json_matcher.hpp"
#include "structured/output_matcher.hpp"
#include "structured/grammar.hpp"
#include "structured/regex.hpp"

namespace actord {
class Tokenizer;
}

namespace actord::structured {

struct TokenVocabulary {
  std::vector<std::string> bytes;                   // [vocab size]
  // A bit per id whose bytes are plain string text (JsonMatcher::plain_text_room), and the other ids that have
  // bytes: inside a string only those are tried.
  std::vector<uint64_t> plain_string;
  std::vector<int32_t> not_plain;
  // For strings with a maximum length: plain_within[k] a bit per plain id of at most k characters (k up to
  // kRoomSteps), longer_plain the plain ids of more, with their counts.
  static constexpr int kRoomSteps = 32;
  std::vector<std::vector<uint64_t>> plain_within;
  std::vector<std::pair<int32_t, int64_t>> longer_plain;
  // The ids whose bytes hold a '"': inside a pattern's string only they may close it.
  std::vector<int32_t> with_quote;
  uint32_t max_token_chars = 0;  // the most characters (UTF-8 lead and ASCII bytes) of any token
  // The tokens' bytes as a trie (node 0 the root): a walk takes each prefix once and drops every token under a
  // prefix the matcher refuses.
  struct Node {
    int32_t first_child = -1, next_sibling = -1;
    int32_t tokens_begin = 0, tokens_end = 0;  // [begin, end) of node_tokens: the ids whose bytes end here
    uint8_t byte = 0;
  };
  std::vector<Node> trie;
  std::vector<int32_t> node_tokens;

  // Every id below vocab_size (the logits row's width, which may exceed the tokenizer's).
  static TokenVocabulary from(const Tokenizer& tok, int vocab_size);
  int size() const { return static_cast<int>(bytes.size()); }
};

void allowed_tokens(const JsonMatcher& matcher, const TokenVocabulary& vocab, std::span<const int32_t> stop_ids,
                    std::vector<uint64_t>& bits);
// Under a regex: the tokens whose bytes its DFA takes whole from the matcher's state (a walk of the trie, one table
// lookup per prefix taken), and the stop ids where the text may end.
void allowed_tokens(const RegexMatcher& matcher, const TokenVocabulary& vocab, std::span<const int32_t> stop_ids,
                    std::vector<uint64_t>& bits);

// The bytes of cached masks that several MaskCaches may hold together (a worker's, over all its patterns and
// grammars): each takes from it as it caches a mask and gives back what it took when it is gone.
struct MaskBudget {
  explicit MaskBudget(int64_t bytes) : left(bytes) {}
  std::atomic<int64_t> left;
};

// The masks of one regex's, grammar's or JSON schema's states over one vocabulary, each state's walk of the trie done
// once and kept while the budget lasts (past it, computed each time): a sequence under `.*`, `[a-z ]+` or inside a
// grammar's string asks the same few states step after step, and a walk that allows most of a large vocabulary costs
// milliseconds (bench/json_mask_bench.cpp). A state is a regex's DFA state, a grammar matcher's key(), a JSON
// matcher's pattern_text_key() inside a string with a pattern or format (what the string takes before it closes is
// kept; the tokens with a quote, which may close it, are tried each time); other JSON states are walked each time
// (their plain-text sets make strings cheap). Safe to use from several threads at once. The vocabulary must outlive
// it.
class MaskCache {
 public:
  MaskCache(const TokenVocabulary& vocab, std::shared_ptr<MaskBudget> budget)
      : vocab_(&vocab), budget_(std::move(budget)) {}
  ~MaskCache() { budget_->left += static_cast<int64_t>(bytes_); }
  MaskCache(const MaskCache&) = delete;
  MaskCache& operator=(const MaskCache&) = delete;
  // allowed_tokens(matcher, vocab, ...) for a matcher of this cache's regex, grammar or schema.
  void allowed(const OutputMatcher& matcher, std::span<const int32_t> stop_ids, std::vector<uint64_t>& bits) const;

 private:
  // The mask of the state `key` names, from the cache or walked (and cached while the budget lasts); no stop ids.
  void cached(const OutputMatcher& matcher, std::string& key, std::vector<uint64_t>& bits) const;
  const TokenVocabulary* vocab_;
  std::shared_ptr<MaskBudget> budget_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::vector<uint64_t>> masks_;  // by state, without the stop ids
  mutable size_t bytes_ = 0;                                              // taken from the budget
};

// Under a grammar: the tokens whose bytes its matcher takes whole (a walk of the trie, one step of the parse stacks
// per prefix taken), and the stop ids where the text may end.
void allowed_tokens(const GrammarMatcher& matcher, const TokenVocabulary& vocab, std::span<const int32_t> stop_ids,
                    std::vector<uint64_t>& bits);
// The mask of whichever grammar the matcher has; through `masks` when given (its regex's, grammar's or schema's).
void allowed_tokens(const OutputMatcher& matcher, const TokenVocabulary& vocab, std::span<const int32_t> stop_ids,
                    std::vector<uint64_t>& bits, const MaskCache* masks = nullptr);

inline bool allowed(std::span<const uint64_t> bits, int32_t id) {
  return id >= 0 && static_cast<size_t>(id) / 64 < bits.size() && (bits[static_cast<size_t>(id) / 64] >> (id % 64)) & 1u;
}

}  // namespace actord::structured
