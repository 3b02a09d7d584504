// The BPE model of HF tokenizer.json (internal header).
//
// Contract: `BpeModel::from_json` reads model.type "BPE" (or a model object without type that has merges):
// vocab, merges (either "a b" strings or [a, b] pairs), unk_token, fuse_unk, byte_fallback, ignore_merges,
// continuing_subword_prefix, end_of_word_suffix. Other model types give Errc::unsupported; merges naming tokens
// not in the vocab give Errc::parse_error. `dropout` is ignored (inference never samples merges).
// `tokenize` follows tokenizers' bpe/model.rs: characters (with prefix/suffix) mapped through the vocab, unknown
// characters to `<0xXX>` byte tokens (byte_fallback) or to unk (fused when fuse_unk), then the lowest-rank
// merge applied repeatedly, leftmost first on ties. No cache: the object is immutable and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.hpp"

namespace actord::tok {

// Token ids of a tokenizer.json (model vocab, added tokens, post-processor ids) are integers in [0, kMaxTokenId):
// tables are sized by the largest id, and every real vocabulary is far smaller (the largest, ~262k).
constexpr int64_t kMaxTokenId = int64_t{1} << 24;

// A JSON value that is a valid token id (an integer, not a float, in [0, kMaxTokenId)).
inline std::optional<int32_t> token_id_of(const nlohmann::json& v) {
  if (v.is_number_unsigned() ? v.get<uint64_t>() >= static_cast<uint64_t>(kMaxTokenId)
                             : !v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= kMaxTokenId)
    return std::nullopt;
  return static_cast<int32_t>(v.get<int64_t>());
}

class BpeModel {
 public:
  static Result<BpeModel> from_json(const nlohmann::json& j, const std::string& where);

  // Appends the ids of `word` to `out`.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Token text of `id`, or nullptr when the model has no such id.
  const std::string* id_to_token(int32_t id) const;
  // One past the largest id in the vocab.
  int32_t id_limit() const { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  struct PairHash {
    std::size_t operator()(uint64_t k) const { return std::hash<uint64_t>()(k); }
  };
  struct MergeInfo {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  const MergeInfo* find_merge(int32_t a, int32_t b) const;
  void merge_all(std::vector<int32_t>& ids) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, MergeInfo, PairHash> merges_;
  std::optional<int32_t> unk_id_;
  int32_t byte_ids_[256];  // id of <0xXX>, -1 when absent
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string prefix_;  // continuing_subword_prefix
  std::string suffix_;  // end_of_word_suffix
};

}  // namespace actord::tok
