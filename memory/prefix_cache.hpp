// The radix prefix cache of a KV block pool (vLLM's automatic prefix caching, SGLang's RadixAttention, at block
// granularity). It sits between a scheduler and its BlockAllocator: every block the scheduler uses is allocated,
// shared and released through it.
//
// Model: a radix tree over token ids whose nodes are FULL blocks. A node is one block id holding exactly
// block_size tokens, keyed under its parent by those tokens (the root is the empty prefix), so a path from the
// root spells a token prefix in whole blocks. Every block handed out has a reference count (the sequences holding
// it). A block is cached (in the tree) or private (e.g. a sequence's partial last block). When its count drops to
// 0 a cached block stays cached and becomes evictable; a private one goes back to the allocator.
//
// Eviction (allocate() when the allocator runs short): least recently used first, only unreferenced blocks, only
// leaves: a node is never evicted before its children, so every cached node stays reachable from the root, and
// evicting a leaf can make its parent an evictable leaf. A block is used when match() returns it (the whole
// matched path) and when it is released; blocks used in the same call are ordered deepest first.
//
// Contract:
// - Block tables are chains from the root: a sequence holds a cached block only together with its parent (match()
//   hands out whole paths, insert() extends the caller's own chain). Take and drop references on whole tables (a
//   fork share()s its parent's table; release() drops a table in any order within the call). Releasing a cached
//   block whose cached child is still held elsewhere breaks this and is a CHECK failure. Thanks to it every
//   unreferenced cached block can be reclaimed by leaf eviction, so num_free() is exact.
// - insert() only after the KV of those blocks is written (the step that computes them has succeeded): from then
//   on any sequence may match them and skip their prefill. A block's content never changes while it is cached.
// - forget() a block whose KV cannot be trusted (the step writing it failed); it is never cached again until it
//   has gone back to the allocator.
// - Broken invariants (releasing or sharing a block nobody holds, inserting a block the caller does not hold or a
//   cached block with other content) are ACTORD_CHECK failures.
// - Disabled (enabled = false): match() finds nothing, insert() does nothing, the rest is plain
//   reference-counted allocation, so a scheduler has one code path.
// - Per-call cost is proportional to the blocks the call touches (O(log n) per evicted block), never to the size
//   of the cache. No global state. Not thread-safe: one scheduler actor owns it.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "memory/block_allocator.hpp"

namespace actord {

struct PrefixCacheStats {
  uint64_t queries = 0;        // match() calls
  uint64_t query_blocks = 0;   // full blocks those calls asked about (the prompt's full blocks, capped by max_blocks)
  uint64_t hit_blocks = 0;     // of which found in the cache
  uint64_t evictions = 0;      // cached blocks evicted to make room
  uint64_t cached_blocks = 0;  // blocks in the tree now
};

class PrefixCache {
 public:
  PrefixCache(BlockAllocator& blocks, int block_size, bool enabled = true);

  // Longest cached prefix of `tokens` in whole blocks, at most max_blocks blocks: appends their ids to `out` (in
  // order) and takes one reference on each for the caller. Returns how many blocks matched.
  // `space` keeps KV that differs for the same tokens apart (a LoRA adapter's: 0 is the base model's): each space
  // has a tree of its own, so a match never crosses spaces.
  size_t match(std::span<const int32_t> tokens, size_t max_blocks, std::vector<uint32_t>& out, uint32_t space = 0);
  // Allocates n fresh blocks (reference count 1, private) into `out`, evicting unreferenced cached blocks (LRU
  // leaves) when the allocator runs short. Returns false and changes nothing when even eviction cannot make room.
  bool allocate(size_t n, std::vector<uint32_t>& out);
  // Takes one more reference on each block (a sequence forked from another shares its blocks). Each must be held.
  void share(std::span<const uint32_t> blocks);
  // Records that blocks[i] holds tokens [i*block_size, (i+1)*block_size) of `tokens`, for the first
  // min(blocks.size(), tokens.size() / block_size) blocks: only full blocks, whose KV is written, on which the
  // caller holds references. Blocks already cached at that place are skipped, so a sequence may insert its whole
  // table again each time a block fills. The chain stops (this block and the rest stay private) at:
  // - a block whose content is already cached under the same parent by ANOTHER block id (a twin, e.g. two equal
  //   prompts prefilled at once). The rest cannot hang under the private block (it is not in the tree, they would
  //   be unreachable), nor under the cached twin: the caller holds the twin's sibling, not the twin, so the twin
  //   could be unreferenced with held children, and unreferenced cached blocks would no longer all be
  //   reclaimable. The twin's chain already caches this content; the private tail returns to the allocator when
  //   released, and a later insert() caches it if the twin has been evicted meanwhile.
  // - a block that was forget()-ten and has not gone back to the allocator since.
  void insert(std::span<const int32_t> tokens, std::span<const uint32_t> blocks, uint32_t space = 0);
  // Drops one reference on each block (a sequence ended or was preempted); the blocks are used now.
  void release(std::span<const uint32_t> blocks);
  // Drops each block from the tree if it is there, with every cached block below it (unreachable without it, and
  // computed from its content): its KV content is no longer trustworthy, e.g. the step writing it failed. Blocks
  // still held stay allocated to their holders, private, and go back to the allocator when released; unheld ones
  // go back now. A forgotten block is not inserted again until it has been back to the allocator.
  void forget(std::span<const uint32_t> blocks);

  size_t num_free() const;       // blocks allocate() can hand out: the allocator's free ones + evictable cached ones
  size_t num_total() const;      // the allocator's total
  size_t num_evictable() const { return unreferenced_cached_; }  // cached blocks no sequence holds
  int block_size() const { return block_size_; }
  bool enabled() const { return enabled_; }
  PrefixCacheStats stats() const { return stats_; }
  uint32_t ref_count(uint32_t block) const;  // for tests
  bool is_cached(uint32_t block) const;       // for tests

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr uint32_t kRoot = UINT32_MAX - 1;  // space 0's root; space s's is kRoot - s
  static constexpr uint32_t kMaxSpaces = 1u << 20;     // block ids stay below kRoot - kMaxSpaces

  // Per block id (each space's root has its own). Tree links are meaningful only while `cached`.
  struct Node {
    uint64_t hash = 0;               // of (parent, tokens): key in index_
    uint64_t last_used = 0;          // tick of its last match or release
    uint32_t ref = 0;
    uint32_t parent = kNone;
    uint32_t first_child = kNone;    // children: an intrusive doubly linked list
    uint32_t next_sibling = kNone;
    uint32_t prev_sibling = kNone;
    uint32_t next_same_hash = kNone; // index_ chain for 64-bit hash collisions
    uint32_t depth = 0;              // root 0, its children 1, ...
    uint32_t num_children = 0;
    uint32_t held_children = 0;      // children with ref > 0
    bool cached = false;
    bool tainted = false;            // forgotten while held: not inserted again before it is freed
  };
  // Evictable leaves, in eviction order: least recently used first, deeper first among equals.
  struct LruKey {
    uint64_t last_used;
    uint32_t inv_depth;  // UINT32_MAX - depth
    uint32_t block;
    auto operator<=>(const LruKey&) const = default;
  };

  static bool is_root(uint32_t id) { return id <= kRoot && id > kRoot - kMaxSpaces; }
  Node& node(uint32_t id) { return is_root(id) ? roots_[kRoot - id] : nodes_[id]; }
  const Node& node(uint32_t id) const { return is_root(id) ? roots_[kRoot - id] : nodes_[id]; }
  uint32_t root_of(uint32_t space);  // the root's id (made on first use)
  bool known(uint32_t id) const { return id < nodes_.size(); }
  std::span<const int32_t> tokens_of(uint32_t id) const;
  uint64_t hash_of(uint32_t parent, std::span<const int32_t> tokens) const;
  uint32_t find_child(uint32_t parent, std::span<const int32_t> tokens, uint64_t hash) const;
  bool is_evictable_leaf(const Node& n) const { return n.cached && n.ref == 0 && n.num_children == 0; }
  LruKey lru_key(uint32_t id) const;
  void link(uint32_t id, uint32_t parent, std::span<const int32_t> tokens, uint64_t hash);
  // Takes one node out of the tree (its children must be gone) and fixes its parent's counts.
  void unlink(uint32_t id);
  void take_reference(uint32_t id);
  void evict_one();
  void flush_freed();  // hands freed_ back to the allocator

  BlockAllocator& blocks_;
  int block_size_;
  bool enabled_;
  std::vector<Node> roots_;                      // [spaces used]: each space's root
  std::vector<Node> nodes_;                      // [max block id seen + 1]
  std::vector<int32_t> tokens_;                  // [max block id seen + 1][block_size], valid while cached
  std::unordered_map<uint64_t, uint32_t> index_; // hash of (parent, tokens) -> first node in its chain
  std::set<LruKey> lru_;                         // evictable leaves
  size_t unreferenced_cached_ = 0;
  uint64_t tick_ = 0;
  PrefixCacheStats stats_;
  std::vector<uint32_t> freed_;                  // scratch: blocks going back to the allocator
  std::vector<uint32_t> scratch_;                // scratch: blocks dropped to 0 in release(), subtree walk
};

}  // namespace actord
