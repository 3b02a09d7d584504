#include "executors/attention_plan.hpp"

#include <algorithm>

namespace actord {

AttentionPlan plan_attention(const ForwardBatch& batch, int split_items) {
  AttentionPlan plan;
  const int n = static_cast<int>(batch.tokens.size());
  std::vector<int32_t>& w = plan.words;
  w.assign(size_t(3) * size_t(n), 0);
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const SeqSlice& slice = batch.seqs[s];
    for (int i = 0; i < slice.num_tokens; ++i) {
      const int t = slice.first_token + i;
      w[size_t(t)] = batch.tokens[size_t(t)];
      w[size_t(n + t)] = static_cast<int32_t>(s);
      w[size_t(2 * n + t)] = slice.start_pos + i;
    }
  }
  plan.flags_at = w.size();
  w.resize(plan.flags_at + batch.seqs.size(), 0);
  plan.tiles_at = w.size();
  auto tiles_so_far = [&] { return static_cast<int>((w.size() - plan.tiles_at) / 3); };
  for (const bool long_ones : {false, true}) {
    if (long_ones) plan.short_tiles = tiles_so_far();
    for (size_t s = 0; s < batch.seqs.size(); ++s) {
      const SeqSlice& slice = batch.seqs[s];
      if (slice.num_tokens < kPrefillMinTokens || (slice.num_tokens >= kLongPrefillTokens) != long_ones) continue;
      w[plan.flags_at + s] = AttentionPlan::kTiled;
      plan.tiled_tokens += slice.num_tokens;
      const int first_tile = tiles_so_far();
      for (int i = 0; i < slice.num_tokens; i += kPrefillTileQueries) {
        w.insert(w.end(), {slice.first_token + i, std::min(kPrefillTileQueries, slice.num_tokens - i),
                           static_cast<int32_t>(s)});
      }
      if (long_ones) {
        plan.long_seqs.push_back(AttentionPlan::LongSeq{static_cast<int>(s), slice.first_token, slice.num_tokens,
                                                        slice.start_pos, first_tile, tiles_so_far() - first_tile});
      }
    }
  }
  plan.n_tiles = tiles_so_far();
  plan.splits_at = w.size();
  int64_t decode_keys = 0;
  for (const SeqSlice& slice : batch.seqs) {
    if (slice.num_tokens == 1) decode_keys += slice.start_pos + 1;
  }
  // Keys per split of a short-context decode: as few as make split_items items, never under kMinSplitKeys.
  const int64_t short_keys =
      split_items > 0 ? std::max<int64_t>(kMinSplitKeys, (decode_keys + split_items - 1) / split_items) : 0;
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const SeqSlice& slice = batch.seqs[s];
    if (slice.num_tokens != 1) continue;
    const int64_t keys = slice.start_pos + 1;
    int count = 1;
    if (keys >= kSplitMinKeys) {  // splits of at most kSplitKeys keys (fewer where the items ask for more)
      const int64_t per = short_keys > 0 ? std::min<int64_t>(kSplitKeys, short_keys) : kSplitKeys;
      count = static_cast<int>((keys + per - 1) / per);
    } else if (short_keys > 0) {  // as many splits of at least short_keys keys as there are
      count = static_cast<int>(keys / short_keys);
    }
    if (count < 2) continue;
    w[plan.flags_at + s] = AttentionPlan::kSplit;
    ++plan.split_tokens;
    for (int i = 0; i < count; ++i) w.insert(w.end(), {slice.first_token, i, count});
  }
  plan.n_splits = static_cast<int>((w.size() - plan.splits_at) / 3);
  return plan;
}

}  // namespace actord
