// The radix prefix cache over KV blocks: matching, reference counts, LRU leaf eviction, twins, forget, disabled
// mode, and a randomized stress against a shadow of every block's content.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "memory/block_allocator.hpp"
#include "memory/prefix_cache.hpp"

using namespace actord;

namespace {

constexpr int kBs = 4;

// n tokens: base, base+1, ...
std::vector<int32_t> run(int32_t base, int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = base + i;
  return t;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

size_t blocks_for(size_t tokens) { return (tokens + kBs - 1) / kBs; }

// A sequence as a scheduler runs it: match, allocate the rest, (its KV is written), insert.
std::vector<uint32_t> admit(PrefixCache& cache, const std::vector<int32_t>& tokens, size_t* matched = nullptr) {
  std::vector<uint32_t> table;
  size_t m = cache.match(tokens, SIZE_MAX, table);
  if (matched) *matched = m;
  REQUIRE(cache.allocate(blocks_for(tokens.size()) - m, table));
  cache.insert(tokens, table);
  return table;
}

}  // namespace

TEST_CASE("a second sequence matches the full blocks of the first, never its partial block", "[prefix_cache]") {
  BlockAllocator alloc(16);
  PrefixCache cache(alloc, kBs);
  auto prompt = run(100, 14);  // 3 full blocks + 2 tokens
  size_t m = 99;
  auto first = admit(cache, prompt, &m);
  CHECK(m == 0);
  REQUIRE(first.size() == 4);
  CHECK(cache.stats().cached_blocks == 3);
  CHECK_FALSE(cache.is_cached(first[3]));

  // Same 14 tokens: the three full blocks, not the partial fourth.
  std::vector<uint32_t> out;
  CHECK(cache.match(prompt, SIZE_MAX, out) == 3);
  CHECK(out == std::vector<uint32_t>(first.begin(), first.begin() + 3));
  // A longer prompt with the same first 12 tokens: still 3; capped by max_blocks: 2.
  auto longer = cat(run(100, 12), run(500, 9));
  std::vector<uint32_t> out2;
  CHECK(cache.match(longer, SIZE_MAX, out2) == 3);
  std::vector<uint32_t> out3;
  CHECK(cache.match(longer, 2, out3) == 2);
  CHECK(out3 == std::vector<uint32_t>(first.begin(), first.begin() + 2));
  // A prompt shorter than a block asks about nothing.
  std::vector<uint32_t> out4;
  CHECK(cache.match(run(100, 3), SIZE_MAX, out4) == 0);

  auto s = cache.stats();
  CHECK(s.queries == 5);
  CHECK(s.query_blocks == 3 + 3 + 5 + 2 + 0);
  CHECK(s.hit_blocks == 3 + 3 + 2);
  CHECK(s.evictions == 0);
  CHECK(cache.ref_count(first[0]) == 4);  // first + three matches
  CHECK(cache.ref_count(first[2]) == 3);
  CHECK(cache.ref_count(first[3]) == 1);
}

TEST_CASE("shared blocks are reference counted and become evictable, not free", "[prefix_cache]") {
  BlockAllocator alloc(8);
  PrefixCache cache(alloc, kBs);
  auto prompt = run(0, 12);
  auto a = admit(cache, prompt);
  std::vector<uint32_t> b;
  REQUIRE(cache.match(prompt, SIZE_MAX, b) == 3);
  CHECK(b == a);
  for (uint32_t id : a) CHECK(cache.ref_count(id) == 2);
  CHECK(cache.num_free() == 5);

  cache.release(a);
  for (uint32_t id : a) CHECK(cache.ref_count(id) == 1);
  CHECK(cache.num_free() == 5);
  CHECK(cache.num_evictable() == 0);

  cache.release(b);
  for (uint32_t id : a) CHECK(cache.ref_count(id) == 0);
  CHECK(cache.num_free() == 8);    // counted as free ...
  CHECK(alloc.num_free() == 5);    // ... but still held by the cache
  CHECK(cache.num_evictable() == 3);
  CHECK(cache.stats().cached_blocks == 3);

  // Still matchable after everyone released them.
  std::vector<uint32_t> c;
  CHECK(cache.match(prompt, SIZE_MAX, c) == 3);
  CHECK(c == a);
  cache.release(c);
}

TEST_CASE("allocation under pressure evicts LRU unreferenced leaves, children before parents", "[prefix_cache]") {
  BlockAllocator alloc(8);
  PrefixCache cache(alloc, kBs);
  auto x = admit(cache, run(0, 12));    // X0-X1-X2
  auto y = admit(cache, run(100, 8));   // Y0-Y1
  auto z = admit(cache, run(200, 8));   // Z0-Z1, held throughout
  CHECK(cache.num_free() == 1);
  cache.release(x);  // oldest
  cache.release(y);
  // Matching X touches its whole path: Y is now the least recently used.
  std::vector<uint32_t> again;
  REQUIRE(cache.match(run(0, 12), SIZE_MAX, again) == 3);
  cache.release(again);
  CHECK(cache.num_free() == 6);

  std::vector<uint32_t> got;
  REQUIRE(cache.allocate(2, got));  // the free block + Y's leaf
  CHECK_FALSE(cache.is_cached(y[1]));
  CHECK(cache.is_cached(y[0]));
  CHECK(cache.stats().evictions == 1);
  REQUIRE(cache.allocate(1, got));  // Y0, a leaf now
  CHECK_FALSE(cache.is_cached(y[0]));
  for (uint32_t id : x) CHECK(cache.is_cached(id));
  REQUIRE(cache.allocate(1, got));  // X's deepest first
  CHECK_FALSE(cache.is_cached(x[2]));
  CHECK(cache.is_cached(x[1]));
  CHECK(cache.stats().evictions == 3);
  CHECK(cache.stats().cached_blocks == 4);

  // Matching what is left of X holds X0 and X1: with Z held too, nothing can be evicted.
  std::vector<uint32_t> held;
  REQUIRE(cache.match(run(0, 8), SIZE_MAX, held) == 2);
  CHECK(cache.num_free() == 0);
  std::vector<uint32_t> none;
  CHECK_FALSE(cache.allocate(1, none));
  CHECK(none.empty());
  for (uint32_t id : z) CHECK(cache.is_cached(id));
  for (uint32_t id : z) CHECK(cache.ref_count(id) == 1);

  cache.release(held);
  REQUIRE(cache.allocate(2, got));  // X1 then X0
  CHECK_FALSE(cache.is_cached(x[0]));
  CHECK(cache.stats().cached_blocks == 2);  // Z's
  CHECK(cache.stats().evictions == 5);
  cache.release(got);
  cache.release(z);
  CHECK(cache.num_free() == cache.num_total());
}

TEST_CASE("blocks released in one call are evicted deepest first", "[prefix_cache]") {
  BlockAllocator alloc(4);
  PrefixCache cache(alloc, kBs);
  auto x = admit(cache, run(0, 12));  // depth 1, 2, 3
  auto w = admit(cache, run(50, 4));  // depth 1
  std::vector<uint32_t> all = {w[0], x[0], x[1], x[2]};
  cache.release(all);  // same tick: x2 (depth 3), x1, then x0 and w0 (depth 1, by id)
  std::vector<uint32_t> got;
  REQUIRE(cache.allocate(1, got));
  CHECK_FALSE(cache.is_cached(x[2]));
  REQUIRE(cache.allocate(1, got));
  CHECK_FALSE(cache.is_cached(x[1]));
  CHECK(cache.is_cached(x[0]));
  CHECK(cache.is_cached(w[0]));
  cache.release(got);
}

TEST_CASE("a prefix diverging in the middle of the tree branches", "[prefix_cache]") {
  BlockAllocator alloc(16);
  PrefixCache cache(alloc, kBs);
  auto stem = run(0, 8);
  auto p1 = cat(stem, run(100, 8));
  auto p2 = cat(stem, run(200, 9));
  auto s1 = admit(cache, p1);
  size_t m = 0;
  auto s2 = admit(cache, p2, &m);
  CHECK(m == 2);
  CHECK(s2[0] == s1[0]);
  CHECK(s2[1] == s1[1]);
  CHECK(s2[2] != s1[2]);
  CHECK(cache.stats().cached_blocks == 6);  // stem 2 + 2 + 2 (s2's partial fifth is private)
  CHECK(cache.ref_count(s1[0]) == 2);

  // Diverging inside the third block: the stem only.
  std::vector<uint32_t> out;
  CHECK(cache.match(cat(stem, {100, 101, 999, 103}), SIZE_MAX, out) == 2);
  cache.release(out);
  out.clear();
  CHECK(cache.match(p2, SIZE_MAX, out) == 4);
  CHECK(out == std::vector<uint32_t>(s2.begin(), s2.begin() + 4));
  cache.release(out);
  out.clear();
  CHECK(cache.match(p1, SIZE_MAX, out) == 4);
  CHECK(out == s1);
  cache.release(out);

  cache.release(s2);  // s2's branch is the older one now
  cache.release(s1);
  std::vector<uint32_t> got;
  REQUIRE(cache.allocate(16 - 6 + 2, got));  // evicts s2's branch only
  CHECK_FALSE(cache.is_cached(s2[2]));
  CHECK_FALSE(cache.is_cached(s2[3]));
  for (uint32_t id : s1) CHECK(cache.is_cached(id));
  cache.release(got);
  CHECK(cache.num_free() == 16);
}

TEST_CASE("a twin of a cached block stays private, and so does the rest of its chain", "[prefix_cache]") {
  BlockAllocator alloc(16);
  PrefixCache cache(alloc, kBs);
  auto prompt = run(0, 10);
  // Both prefilled at once: neither matched anything.
  std::vector<uint32_t> a, b;
  REQUIRE(cache.allocate(3, a));
  REQUIRE(cache.allocate(3, b));
  cache.insert(prompt, a);
  auto longer = cat(run(0, 8), run(300, 4));  // b generates on: its third block fills with other tokens
  cache.insert(longer, b);
  for (uint32_t id : b) CHECK_FALSE(cache.is_cached(id));
  CHECK(cache.stats().cached_blocks == 2);
  // Inserting the same table again (each time a block fills) changes nothing.
  cache.insert(prompt, a);
  CHECK(cache.stats().cached_blocks == 2);

  size_t before = alloc.num_free();
  cache.release(b);
  CHECK(alloc.num_free() == before + 3);  // straight back to the allocator
  CHECK(cache.num_evictable() == 0);

  // Once the twin is evicted, a later insert caches the other copy.
  std::vector<uint32_t> c;
  REQUIRE(cache.allocate(2, c));
  cache.release(a);
  std::vector<uint32_t> all;
  REQUIRE(cache.allocate(16 - 2, all));  // evicts a's two cached blocks
  CHECK(cache.stats().cached_blocks == 0);
  cache.insert(run(0, 8), c);
  CHECK(cache.is_cached(c[0]));
  CHECK(cache.is_cached(c[1]));
  cache.release(all);
  cache.release(c);
  CHECK(cache.num_free() == 16);
}

TEST_CASE("forgotten blocks are not matched and return to the allocator when released", "[prefix_cache]") {
  BlockAllocator alloc(8);
  PrefixCache cache(alloc, kBs);
  auto prompt = run(0, 13);
  auto s = admit(cache, prompt);  // 3 cached + 1 partial
  CHECK(cache.stats().cached_blocks == 3);
  std::vector<uint32_t> forgotten = {s[1]};
  cache.forget(forgotten);  // s[1] and s[2] below it leave the tree
  CHECK(cache.is_cached(s[0]));
  CHECK_FALSE(cache.is_cached(s[1]));
  CHECK_FALSE(cache.is_cached(s[2]));
  CHECK(cache.stats().cached_blocks == 1);
  for (uint32_t id : s) CHECK(cache.ref_count(id) == 1);  // still the holder's

  std::vector<uint32_t> out;
  CHECK(cache.match(prompt, SIZE_MAX, out) == 1);
  cache.release(out);
  cache.insert(prompt, s);  // the holder inserts again: not above the forgotten block
  CHECK_FALSE(cache.is_cached(s[1]));
  CHECK_FALSE(cache.is_cached(s[2]));

  size_t before = alloc.num_free();
  cache.release(s);
  CHECK(alloc.num_free() == before + 3);  // s[1], s[2], the partial one
  CHECK(cache.num_evictable() == 1);      // s[0]

  // Forgetting an unreferenced cached block hands it back at once.
  std::vector<uint32_t> first = {s[0]};
  cache.forget(first);
  CHECK(alloc.num_free() == 8);
  CHECK(cache.stats().cached_blocks == 0);
  // Once back in the allocator, the block may be cached again.
  auto again = admit(cache, prompt);
  CHECK(cache.stats().cached_blocks == 3);
  cache.release(again);
  CHECK(cache.num_free() == 8);
}

TEST_CASE("disabled, the cache never matches and blocks go straight back", "[prefix_cache]") {
  BlockAllocator alloc(8);
  PrefixCache cache(alloc, kBs, false);
  CHECK_FALSE(cache.enabled());
  auto prompt = run(0, 12);
  size_t m = 9;
  auto a = admit(cache, prompt, &m);
  CHECK(m == 0);
  std::vector<uint32_t> out;
  CHECK(cache.match(prompt, SIZE_MAX, out) == 0);
  CHECK(out.empty());
  CHECK(cache.stats().cached_blocks == 0);
  CHECK(cache.stats().hit_blocks == 0);
  cache.share(a);
  CHECK(cache.ref_count(a[0]) == 2);
  cache.release(a);
  CHECK(alloc.num_free() == 5);
  cache.release(a);
  CHECK(alloc.num_free() == 8);
  CHECK(cache.num_free() == 8);
}

TEST_CASE("a failed allocation changes nothing", "[prefix_cache]") {
  BlockAllocator alloc(6);
  PrefixCache cache(alloc, kBs);
  auto a = admit(cache, run(0, 8));
  auto b = admit(cache, run(100, 8));
  cache.release(a);  // a's two blocks are evictable; b's are held
  CHECK(cache.num_free() == 4);
  auto stats = cache.stats();
  std::vector<uint32_t> out = {77};
  CHECK_FALSE(cache.allocate(5, out));
  CHECK(out == std::vector<uint32_t>{77});
  CHECK(cache.num_free() == 4);
  CHECK(alloc.num_free() == 2);
  CHECK(cache.stats().evictions == stats.evictions);
  CHECK(cache.stats().cached_blocks == stats.cached_blocks);
  for (uint32_t id : a) CHECK(cache.is_cached(id));
  std::vector<uint32_t> m;
  CHECK(cache.match(run(0, 8), SIZE_MAX, m) == 2);
  cache.release(m);
  cache.release(b);
  CHECK(cache.num_free() == 6);
}

TEST_CASE("randomized sequences against a small pool keep contents and counts right", "[prefix_cache]") {
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    constexpr uint32_t kBlocks = 24;
    BlockAllocator alloc(kBlocks);
    PrefixCache cache(alloc, kBs);

    // A tiny vocabulary on top of a few stems: many shared prefixes, twins and equal blocks under other parents.
    std::vector<std::vector<int32_t>> stems;
    for (int s = 0; s < 3; ++s) {
      std::vector<int32_t> stem(uniform(4, 20));
      for (auto& t : stem) t = uniform(0, 2);
      stems.push_back(stem);
    }
    struct Seq {
      std::vector<int32_t> tokens;
      std::vector<uint32_t> blocks;
    };
    std::vector<Seq> live;
    std::map<uint32_t, std::vector<int32_t>> shadow;  // block -> the tokens its writer put in it
    std::vector<uint32_t> refs(kBlocks, 0);           // the test's own count
    std::set<uint32_t> untrusted;                     // forgotten, not yet handed out again
    uint64_t total_matched = 0;

    auto write = [&](Seq& seq, size_t from_block) {  // the KV of blocks [from_block, ...) is written
      for (size_t i = from_block; i < seq.blocks.size(); ++i) {
        size_t lo = i * kBs, hi = std::min(seq.tokens.size(), lo + kBs);
        shadow[seq.blocks[i]].assign(seq.tokens.begin() + lo, seq.tokens.begin() + hi);
      }
    };
    auto take = [&](const std::vector<uint32_t>& got, size_t from) {
      for (size_t i = from; i < got.size(); ++i) {
        REQUIRE(refs[got[i]] == 0);  // never a block someone holds
        refs[got[i]] = 1;
        untrusted.erase(got[i]);
      }
    };
    auto drop = [&](const std::vector<uint32_t>& blocks) {
      for (uint32_t id : blocks) --refs[id];
    };
    auto check_match = [&](const std::vector<int32_t>& tokens, const std::vector<uint32_t>& got, size_t n) {
      for (size_t i = 0; i < n; ++i) {
        std::vector<int32_t> want(tokens.begin() + i * kBs, tokens.begin() + (i + 1) * kBs);
        REQUIRE(shadow[got[i]] == want);
        REQUIRE(untrusted.count(got[i]) == 0);
        ++refs[got[i]];
      }
    };

    for (int iter = 0; iter < 4000; ++iter) {
      int op = uniform(0, 9);
      if (op <= 3 || live.empty()) {  // a new sequence
        Seq seq;
        const auto& stem = stems[uniform(0, 2)];
        seq.tokens.assign(stem.begin(), stem.begin() + uniform(0, static_cast<int>(stem.size())));
        for (int n = uniform(0, 12); n > 0; --n) seq.tokens.push_back(uniform(0, 2));
        if (seq.tokens.empty()) seq.tokens.push_back(0);
        // Sometimes leave the last token to compute, as a scheduler must to get logits.
        size_t cap = uniform(0, 1) ? SIZE_MAX : (seq.tokens.size() - 1) / kBs;
        size_t m = cache.match(seq.tokens, cap, seq.blocks);
        REQUIRE(m == seq.blocks.size());
        check_match(seq.tokens, seq.blocks, m);
        total_matched += m;
        size_t need = blocks_for(seq.tokens.size()) - m;
        size_t free_before = cache.num_free();
        if (!cache.allocate(need, seq.blocks)) {
          REQUIRE(free_before < need);
          REQUIRE(cache.num_free() == free_before);
          cache.release(seq.blocks);
          drop(seq.blocks);
          continue;
        }
        take(seq.blocks, m);
        write(seq, m);
        if (uniform(0, 3)) cache.insert(seq.tokens, seq.blocks);  // else: inserted when it grows
        live.push_back(std::move(seq));
      } else if (op <= 5) {  // a running sequence generates tokens
        Seq& seq = live[uniform(0, static_cast<int>(live.size()) - 1)];
        size_t first_dirty = seq.tokens.size() / kBs;  // its partial last block (or the next one)
        for (int n = uniform(1, 6); n > 0; --n) seq.tokens.push_back(uniform(0, 2));
        size_t have = seq.blocks.size();
        size_t need = blocks_for(seq.tokens.size()) - have;
        if (!cache.allocate(need, seq.blocks)) {
          seq.tokens.resize(std::min(seq.tokens.size(), have * kBs));  // it stops where its blocks end
          first_dirty = std::min(first_dirty, have);
        } else {
          take(seq.blocks, have);
        }
        write(seq, first_dirty);
        cache.insert(seq.tokens, seq.blocks);
      } else if (op == 6) {  // a fork shares the full blocks and copies the partial one
        Seq& parent = live[uniform(0, static_cast<int>(live.size()) - 1)];
        Seq child;
        child.tokens = parent.tokens;
        size_t full = parent.tokens.size() / kBs;
        child.blocks.assign(parent.blocks.begin(), parent.blocks.begin() + full);
        if (full < parent.blocks.size()) {
          if (!cache.allocate(1, child.blocks)) continue;
          take(child.blocks, full);
        }
        std::span<const uint32_t> shared(child.blocks.data(), full);
        cache.share(shared);
        for (uint32_t id : shared) ++refs[id];
        write(child, full);
        live.push_back(std::move(child));
      } else if (op <= 8) {  // a sequence ends: its table released in any order
        size_t i = uniform(0, static_cast<int>(live.size()) - 1);
        auto blocks = live[i].blocks;
        std::shuffle(blocks.begin(), blocks.end(), rng);
        cache.release(blocks);
        drop(blocks);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      } else {  // a step failed: a sequence's last full block cannot be trusted
        Seq& seq = live[uniform(0, static_cast<int>(live.size()) - 1)];
        size_t full = seq.tokens.size() / kBs;
        if (full == 0) continue;
        std::vector<uint32_t> bad = {seq.blocks[full - 1]};
        cache.forget(bad);
        untrusted.insert(bad[0]);
      }

      // Every block is held, free in the allocator, or cached and unreferenced.
      size_t held = 0;
      for (uint32_t id = 0; id < kBlocks; ++id) {
        REQUIRE(cache.ref_count(id) == refs[id]);
        held += refs[id] > 0;
      }
      REQUIRE(held + cache.num_free() == kBlocks);
      REQUIRE(cache.num_evictable() + alloc.num_free() == cache.num_free());
      REQUIRE(cache.stats().cached_blocks <= kBlocks);
    }
    CHECK(total_matched > 100);
    CHECK(cache.stats().evictions > 0);
    CHECK(cache.stats().hit_blocks == total_matched);

    for (auto& seq : live) {
      cache.release(seq.blocks);
      drop(seq.blocks);
    }
    CHECK(cache.num_free() == cache.num_total());
    CHECK(cache.num_total() == kBlocks);
    std::vector<uint32_t> everything;
    REQUIRE(cache.allocate(kBlocks, everything));  // evicts the whole tree
    CHECK(cache.stats().cached_blocks == 0);
    cache.release(everything);
    CHECK(alloc.num_free() == kBlocks);
  }
}

TEST_CASE("spaces (LoRA adapters) keep equal token prefixes apart - each space matches its own blocks",
          "[prefix][lora]") {
  BlockAllocator alloc(16);
  PrefixCache cache(alloc, kBs);
  const auto tokens = run(100, 3 * kBs);
  std::vector<uint32_t> base;
  REQUIRE(cache.allocate(3, base));
  cache.insert(tokens, base);
  std::vector<uint32_t> adapter;
  REQUIRE(cache.allocate(3, adapter));
  cache.insert(tokens, adapter, 1);  // the same tokens, another space: not a twin of base's blocks
  for (uint32_t b : adapter) CHECK(cache.is_cached(b));
  std::vector<uint32_t> found;
  CHECK(cache.match(tokens, SIZE_MAX, found, 2) == 0);  // a space nobody used
  CHECK(cache.match(tokens, SIZE_MAX, found, 1) == 3);
  CHECK(found == adapter);
  cache.release(found);
  found.clear();
  CHECK(cache.match(tokens, SIZE_MAX, found) == 3);
  CHECK(found == base);
  cache.release(found);
  cache.release(base);
  cache.release(adapter);
  // Eviction reaches every space's leaves: all six blocks come back.
  std::vector<uint32_t> all;
  REQUIRE(cache.allocate(16, all));
  CHECK(cache.stats().cached_blocks == 0);
}
