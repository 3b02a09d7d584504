// The host plan of a step's attention among the CUDA backend's kernels (executors/attention_plan.hpp): which
// sequences go to prefill tiles (short first, then long), which decodes are cut into splits, and that every token
// lands on exactly one path. Pure C++: runs everywhere.
#include <catch2/catch.hpp>
#include <set>
#include <vector>

#include "executors/attention_plan.hpp"

using namespace actord;

namespace {

ForwardBatch batch_of(const std::vector<std::pair<int, int>>& slices) {  // {tokens, start position} each
  ForwardBatch batch;
  int first = 0;
  for (auto [len, start] : slices) {
    batch.seqs.push_back(SeqSlice{first, len, start, nullptr, true});
    for (int i = 0; i < len; ++i) batch.tokens.push_back(100 + first + i);
    first += len;
  }
  return batch;
}

}  // namespace

TEST_CASE("attention plan: tiles for prefills (short ones first), splits for long-context decodes, one path a token",
          "[attention_plan]") {
  // 0: prefill of 40 (tiles 32 + 8); 1: chunk of 7 (one warp per query); 2: 600 tokens over 100 cached (long:
  // 18 tiles of 32 and one of 24); 3: decode at 1023 (4 splits); 4: decode at 1022 (under kSplitMinKeys); 5: decode
  // at 2047 (8 splits); 6: a chunk of exactly kPrefillMinTokens (one tile).
  const ForwardBatch batch = batch_of({{40, 0}, {7, 33}, {600, 100}, {1, 1023}, {1, 1022}, {1, 2047}, {8, 50}});
  const AttentionPlan plan = plan_attention(batch);
  const int n = static_cast<int>(batch.tokens.size());
  const auto& w = plan.words;

  // Tokens, their sequences and positions.
  REQUIRE(plan.flags_at == size_t(3 * n));
  for (int s = 0; s < int(batch.seqs.size()); ++s) {
    for (int i = 0; i < batch.seqs[s].num_tokens; ++i) {
      const int t = batch.seqs[s].first_token + i;
      CHECK(w[size_t(t)] == batch.tokens[size_t(t)]);
      CHECK(w[size_t(n + t)] == s);
      CHECK(w[size_t(2 * n + t)] == batch.seqs[s].start_pos + i);
    }
  }
  const std::vector<int32_t> flags(w.begin() + long(plan.flags_at), w.begin() + long(plan.tiles_at));
  CHECK(flags == std::vector<int32_t>{AttentionPlan::kTiled, 0, AttentionPlan::kTiled, AttentionPlan::kSplit, 0,
                                      AttentionPlan::kSplit, AttentionPlan::kTiled});

  // Tiles: sequences 0 and 6 first (3 tiles), then sequence 2's 19.
  REQUIRE(plan.short_tiles == 3);
  REQUIRE(plan.n_tiles == 3 + 19);
  REQUIRE(plan.splits_at == plan.tiles_at + size_t(3 * plan.n_tiles));
  auto tile = [&](int i) { return std::vector<int32_t>(w.begin() + long(plan.tiles_at) + 3 * i,
                                                       w.begin() + long(plan.tiles_at) + 3 * i + 3); };
  CHECK(tile(0) == std::vector<int32_t>{0, 32, 0});
  CHECK(tile(1) == std::vector<int32_t>{32, 8, 0});
  CHECK(tile(2) == std::vector<int32_t>{batch.seqs[6].first_token, 8, 6});
  CHECK(tile(3) == std::vector<int32_t>{batch.seqs[2].first_token, 32, 2});
  CHECK(tile(21) == std::vector<int32_t>{batch.seqs[2].first_token + 576, 24, 2});
  REQUIRE(plan.long_seqs.size() == 1);
  const AttentionPlan::LongSeq& ls = plan.long_seqs[0];
  CHECK((ls.seq == 2 && ls.first_token == batch.seqs[2].first_token && ls.count == 600 && ls.start_pos == 100 &&
         ls.first_tile == 3 && ls.tile_count == 19));
  CHECK(plan.tiled_tokens == 40 + 600 + 8);

  // Splits: sequence 3's 4, then sequence 5's 8, each {token, split, count} in order.
  REQUIRE(plan.n_splits == 4 + 8);
  REQUIRE(w.size() == plan.splits_at + size_t(3 * plan.n_splits));
  for (int i = 0; i < plan.n_splits; ++i) {
    const bool first_decode = i < 4;
    const int32_t* split = w.data() + plan.splits_at + size_t(3 * i);
    CHECK(split[0] == batch.seqs[first_decode ? 3 : 5].first_token);
    CHECK(split[1] == (first_decode ? i : i - 4));
    CHECK(split[2] == (first_decode ? 4 : 8));
  }
  CHECK(plan.split_tokens == 2);

  // Every token on exactly one path: the tiles' tokens, the split decodes, the rest one warp per query.
  std::multiset<int> covered;
  for (int i = 0; i < plan.n_tiles; ++i)
    for (int j = 0; j < tile(i)[1]; ++j) covered.insert(tile(i)[0] + j);
  for (int s : {3, 5}) covered.insert(batch.seqs[s].first_token);
  for (int t = 0; t < n; ++t) {
    const int32_t flag = flags[size_t(w[size_t(n + t)])];
    CHECK(covered.count(t) == (flag != 0 ? 1u : 0u));
  }
}

TEST_CASE("attention plan: an empty step and a step of decodes only plan nothing but the layout", "[attention_plan]") {
  const AttentionPlan empty = plan_attention(ForwardBatch{});
  CHECK(empty.words.empty());
  CHECK((empty.n_tiles == 0 && empty.n_splits == 0 && empty.long_seqs.empty()));
  const AttentionPlan decodes = plan_attention(batch_of({{1, 5}, {1, 300}, {1, 1022}}));
  CHECK((decodes.n_tiles == 0 && decodes.n_splits == 0 && decodes.tiled_tokens == 0 && decodes.split_tokens == 0));
  CHECK(decodes.words.size() == 3 * 3 + 3);
}

TEST_CASE("attention plan: short-context decodes are split when too few to fill the GPU (split_items)",
          "[attention_plan]") {
  auto counts = [](const AttentionPlan& plan) {  // each split decode's count, in order
    std::vector<int32_t> out;
    for (int i = 0; i < plan.n_splits; ++i) {
      const int32_t* split = plan.words.data() + plan.splits_at + size_t(3 * i);
      if (split[1] == 0) out.push_back(split[2]);
    }
    return out;
  };
  // One decode at position 150 (151 keys), 132 items wanted: splits of kMinSplitKeys (8) keys, 18 of them. A decode
  // of 21 keys makes 2; one of 6 keys is under two splits: one warp per query.
  const AttentionPlan one = plan_attention(batch_of({{1, 150}, {1, 20}, {1, 5}}), 132);
  CHECK(counts(one) == std::vector<int32_t>{18, 2});
  CHECK(one.split_tokens == 2);
  // 64 decodes of 160 keys: 10,240 keys over 132 items, 78 a split: 2 splits each (as many of 78+ keys as fit).
  std::vector<std::pair<int, int>> many(64, {1, 159});
  const AttentionPlan b64 = plan_attention(batch_of(many), 132);
  CHECK(counts(b64) == std::vector<int32_t>(64, 2));
  // ... and none when the items are about the decodes already (66 items: 156 keys a split).
  CHECK(plan_attention(batch_of(many), 66).n_splits == 0);
  // 256 decodes of 201 keys fill the GPU as they are: no splits.
  std::vector<std::pair<int, int>> full(256, {1, 200});
  CHECK(plan_attention(batch_of(full), 132).n_splits == 0);
  // A long-context decode alone: splits as short as the items ask (128 of 16 keys), never longer than kSplitKeys.
  CHECK(counts(plan_attention(batch_of({{1, 2047}}), 132)) == std::vector<int32_t>{128});
  CHECK(counts(plan_attention(batch_of(std::vector<std::pair<int, int>>(256, {1, 2047})), 132)) ==
        std::vector<int32_t>(256, 8));
  // Without split_items only the long-context rule applies; a prefill's tokens are never split.
  CHECK(plan_attention(batch_of({{1, 150}}), 0).n_splits == 0);
  CHECK(plan_attention(batch_of({{40, 0}}), 132).n_splits == 0);
}
