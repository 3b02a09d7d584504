// How a step's attention is divided among the CUDA backend's kernels, planned on the host from the ForwardBatch
// (pure C++: no CUDA, tested in CI; executors/cuda/ uploads it with the step's layout).
//
// Contract: every token goes to exactly one path (where that path's kernel runs; the backend falls back to one warp
// per query for any path it does not run):
//   - sequences of kPrefillMinTokens tokens or more: prefill tiles of up to kPrefillTileQueries consecutive tokens
//     (flag kTiled), those under kLongPrefillTokens first, then the long ones (`long_seqs`, which the tensor-core
//     path takes where it fits, their tiles kept for its check and as its fallback);
//   - one-token sequences (decodes) cut into splits (flag kSplit) listed in order {token, split, count}: those at
//     position kSplitMinKeys - 1 or later in splits of at most kSplitKeys keys; shorter ones too when the step's
//     decodes are too few to fill the GPU (`split_items`: the number of (decode, split) items the backend wants in
//     all, 0 for none): per = max(kMinSplitKeys, ceil(the decodes' keys / split_items)), floor(keys / per) splits
//     of a short one (none under two), ceil(keys / min(per, kSplitKeys)) of a long one;
//   - the rest: one warp per (token, head).
// `words` is what the backend uploads: tokens, then each token's sequence, then its position ([3][n]), the flags
// per sequence, the tiles ([n_tiles][3] {first token, count, sequence}), the splits ([n_splits][3]); the *_at fields
// say where each part starts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "executors/forward_batch.hpp"

namespace actord {

constexpr int kPrefillTileQueries = 32;
constexpr int kPrefillMinTokens = 8;
constexpr int kLongPrefillTokens = 512;
constexpr int kSplitMinKeys = 1024;  // a decode at this position or later is cut in splits
constexpr int kSplitKeys = 256;      // keys per split (before a window shortens them)
constexpr int kMinSplitKeys = 8;     // fewest keys per split of a short-context decode

struct AttentionPlan {
  static constexpr int32_t kTiled = 1, kSplit = 2;
  // A sequence of kLongPrefillTokens or more: its tokens, start position and prefill tiles.
  struct LongSeq {
    int seq, first_token, count, start_pos, first_tile, tile_count;
  };
  std::vector<int32_t> words;
  size_t flags_at = 0, tiles_at = 0, splits_at = 0;
  int n_tiles = 0, n_splits = 0;
  int short_tiles = 0;  // tiles of sequences under kLongPrefillTokens (they come first)
  int tiled_tokens = 0, split_tokens = 0;
  std::vector<LongSeq> long_seqs;
};

AttentionPlan plan_attention(const ForwardBatch& batch, int split_items = 0);

}  // namespace actord
