// KV blocks re-laid out between replica shapes (memory/kv_relayout.hpp): the shards of one shape gathered into the
// whole model's blocks and cut again into another shape's shards give every (layer, head, kv, slot, dim) element the
// value it had, checked element by element against an index function.
#include <catch2/catch.hpp>

#include <vector>

#include "memory/kv_relayout.hpp"

using namespace actord;

namespace {

// The element's value: a function of where it is in the whole model, so any misplaced copy shows.
uint16_t value_at(size_t block, int layer, int kv, int head, int slot, int dim) {
  return static_cast<uint16_t>((block * 7919 + size_t(layer) * 104729 + size_t(kv) * 31 + size_t(head) * 613 +
                                size_t(slot) * 17 + size_t(dim)) % 65521);
}

// A shard's blocks filled from value_at: each head region's bytes (its slots' elements, then any row scales) told
// apart by block, layer, k|v, head and place.
std::vector<unsigned char> fill(const KvShard& s, size_t blocks) {
  std::vector<unsigned char> out(s.block_bytes() * blocks);
  unsigned char* p = out.data();
  for (size_t b = 0; b < blocks; ++b)
    for (int l = 0; l < s.num_layers; ++l)
      for (int kv = 0; kv < 2; ++kv)
        for (int h = 0; h < s.num_heads; ++h)
          for (size_t i = 0; i < s.head_bytes(); ++i)
            *p++ = static_cast<unsigned char>(value_at(b, s.first_layer + l, kv, s.first_head + h, 0, int(i)) % 251);
  return out;
}

// The element format of the shards a test case cuts: 2-byte elements (bf16 / f16), or int8 codes with a 4-byte scale
// per slot.
struct Format {
  size_t elem_bytes, scale_bytes;
};

KvShard shard(int first_layer, int layers, int first_head, int heads, Format f = {2, 0}) {
  return {6, 4, first_layer, layers, first_head, heads, 8, 4, f.elem_bytes, f.scale_bytes};
}

}  // namespace

TEST_CASE("kv relayout: tp2 x pp2 shards gathered into the whole model, cut into tp4 and pp3 shards, equal the "
          "blocks filled in place - 2-byte elements and int8 with row scales", "[kv][relayout]") {
  const Format f = GENERATE(Format{2, 0}, Format{1, 4});
  INFO("element bytes " << f.elem_bytes << ", scale bytes " << f.scale_bytes);
  const size_t blocks = 3;
  const KvShard whole = KvShard::whole(6, 4, 8, 4, f.elem_bytes, f.scale_bytes);
  CHECK(whole.head_bytes() == 4 * (8 * f.elem_bytes + f.scale_bytes));
  std::vector<unsigned char> gathered(whole.block_bytes() * blocks, 0);
  for (int stage = 0; stage < 2; ++stage)
    for (int t = 0; t < 2; ++t) {
      const KvShard s = shard(stage * 3, 3, t * 2, 2, f);
      copy_kv_overlap(fill(s, blocks).data(), s, gathered.data(), whole, blocks);
    }
  CHECK(gathered == fill(whole, blocks));
  // tp4 (one head each) and pp3 (two layers each) cut from it, and a replicated head (tp 8 over 4 heads).
  for (const KvShard& s : {shard(0, 6, 3, 1, f), shard(2, 2, 0, 4, f), shard(4, 2, 1, 2, f), shard(0, 2, 2, 1, f)}) {
    std::vector<unsigned char> cut(s.block_bytes() * blocks, 0);
    REQUIRE(whole.covers(s));
    REQUIRE(whole.compatible(s));
    copy_kv_overlap(gathered.data(), whole, cut.data(), s, blocks);
    CHECK(cut == fill(s, blocks));
  }
}

TEST_CASE("kv relayout: shards that share nothing copy nothing and covers() says which shard holds which",
          "[kv][relayout]") {
  const KvShard a = shard(0, 3, 0, 2), b = shard(3, 3, 2, 2);
  std::vector<unsigned char> src = fill(a, 1), dst(b.block_bytes(), 0xAB);
  copy_kv_overlap(src.data(), a, dst.data(), b, 1);
  CHECK(std::all_of(dst.begin(), dst.end(), [](unsigned char c) { return c == 0xAB; }));
  CHECK_FALSE(a.covers(b));
  CHECK(KvShard::whole(6, 4, 8, 4, 2).covers(b));
  CHECK_FALSE(a.compatible(KvShard::whole(6, 4, 8, 16, 2)));
  CHECK_FALSE(shard(0, 6, 0, 4, {1, 4}).compatible(shard(0, 6, 0, 4, {1, 0})));  // int8 codes with and without scales
}
