#include "memory/prefix_cache.hpp"

#include <algorithm>

#include "core/status.hpp"

namespace actord {

PrefixCache::PrefixCache(BlockAllocator& blocks, int block_size, bool enabled)
    : blocks_(blocks), block_size_(block_size), enabled_(enabled) {
  ACTORD_CHECK_MSG(block_size > 0, "prefix cache needs a positive block size");
}

std::span<const int32_t> PrefixCache::tokens_of(uint32_t id) const {
  return {tokens_.data() + static_cast<size_t>(id) * block_size_, static_cast<size_t>(block_size_)};
}

uint64_t PrefixCache::hash_of(uint32_t parent, std::span<const int32_t> tokens) const {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ (static_cast<uint64_t>(parent) * 0xC2B2AE3D27D4EB4FULL);
  for (int32_t t : tokens) {
    h = (h ^ static_cast<uint32_t>(t)) * 0x9E3779B97F4A7C15ULL;
    h ^= h >> 29;
  }
  // splitmix64's finalizer
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ULL;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBULL;
  return h ^ (h >> 31);
}

uint32_t PrefixCache::find_child(uint32_t parent, std::span<const int32_t> tokens, uint64_t hash) const {
  auto it = index_.find(hash);
  if (it == index_.end()) return kNone;
  for (uint32_t id = it->second; id != kNone; id = nodes_[id].next_same_hash) {
    if (nodes_[id].parent == parent && std::ranges::equal(tokens_of(id), tokens)) return id;
  }
  return kNone;
}

PrefixCache::LruKey PrefixCache::lru_key(uint32_t id) const {
  const Node& n = nodes_[id];
  return LruKey{n.last_used, UINT32_MAX - n.depth, id};
}

void PrefixCache::link(uint32_t id, uint32_t parent, std::span<const int32_t> tokens, uint64_t hash) {
  Node& n = nodes_[id];
  Node& p = node(parent);
  if (!is_root(parent) && is_evictable_leaf(p)) lru_.erase(lru_key(parent));  // stops being a leaf
  n.cached = true;
  n.parent = parent;
  n.hash = hash;
  n.depth = p.depth + 1;
  n.first_child = kNone;
  n.num_children = 0;
  n.held_children = 0;
  n.last_used = tick_;
  std::ranges::copy(tokens, tokens_.begin() + static_cast<std::ptrdiff_t>(id) * block_size_);
  n.prev_sibling = kNone;
  n.next_sibling = p.first_child;
  if (p.first_child != kNone) nodes_[p.first_child].prev_sibling = id;
  p.first_child = id;
  ++p.num_children;
  if (n.ref > 0) {
    ++p.held_children;
  } else {
    ++unreferenced_cached_;
    if (is_evictable_leaf(n)) lru_.insert(lru_key(id));
  }
  auto [it, inserted] = index_.try_emplace(hash, id);
  n.next_same_hash = inserted ? kNone : it->second;
  if (!inserted) it->second = id;
  ++stats_.cached_blocks;
}

void PrefixCache::unlink(uint32_t id) {
  Node& n = nodes_[id];
  ACTORD_CHECK(n.cached && n.num_children == 0);
  if (is_evictable_leaf(n)) lru_.erase(lru_key(id));
  auto it = index_.find(n.hash);
  ACTORD_CHECK(it != index_.end());
  if (it->second == id) {
    if (n.next_same_hash == kNone) {
      index_.erase(it);
    } else {
      it->second = n.next_same_hash;
    }
  } else {
    uint32_t prev = it->second;
    while (nodes_[prev].next_same_hash != id) {
      prev = nodes_[prev].next_same_hash;
      ACTORD_CHECK(prev != kNone);
    }
    nodes_[prev].next_same_hash = n.next_same_hash;
  }
  Node& p = node(n.parent);
  if (n.prev_sibling == kNone) {
    p.first_child = n.next_sibling;
  } else {
    nodes_[n.prev_sibling].next_sibling = n.next_sibling;
  }
  if (n.next_sibling != kNone) nodes_[n.next_sibling].prev_sibling = n.prev_sibling;
  --p.num_children;
  if (n.ref > 0) {
    --p.held_children;
  } else {
    --unreferenced_cached_;
    n.tainted = false;
    freed_.push_back(id);  // unreferenced and private: the allocator's again
  }
  uint32_t parent = n.parent;
  n.cached = false;
  n.parent = n.next_sibling = n.prev_sibling = n.next_same_hash = kNone;
  --stats_.cached_blocks;
  if (!is_root(parent) && is_evictable_leaf(p)) lru_.insert(lru_key(parent));
}

void PrefixCache::take_reference(uint32_t id) {
  Node& n = nodes_[id];
  if (n.ref == 0 && n.cached) {
    if (n.num_children == 0) lru_.erase(lru_key(id));
    --unreferenced_cached_;
    ++node(n.parent).held_children;
  }
  ++n.ref;
}

void PrefixCache::evict_one() {
  ACTORD_CHECK_MSG(!lru_.empty(), "unreferenced cached blocks but no evictable leaf");
  uint32_t id = lru_.begin()->block;
  unlink(id);  // takes it out of lru_, makes its parent a leaf candidate, queues it for the allocator
  ++stats_.evictions;
}

void PrefixCache::flush_freed() {
  if (freed_.empty()) return;
  blocks_.free(freed_);
  freed_.clear();
}

uint32_t PrefixCache::root_of(uint32_t space) {
  ACTORD_CHECK_MSG(space < kMaxSpaces, "a prefix cache space beyond the roots it has room for");
  if (space >= roots_.size()) roots_.resize(size_t(space) + 1);
  return kRoot - space;
}

size_t PrefixCache::match(std::span<const int32_t> tokens, size_t max_blocks, std::vector<uint32_t>& out,
                          uint32_t space) {
  size_t want = std::min(tokens.size() / static_cast<size_t>(block_size_), max_blocks);
  ++stats_.queries;
  stats_.query_blocks += want;
  if (!enabled_ || want == 0) return 0;
  ++tick_;
  uint32_t parent = root_of(space);
  size_t matched = 0;
  for (; matched < want; ++matched) {
    auto chunk = tokens.subspan(matched * block_size_, block_size_);
    uint32_t id = find_child(parent, chunk, hash_of(parent, chunk));
    if (id == kNone) break;
    take_reference(id);  // out of lru_ before its key changes
    nodes_[id].last_used = tick_;
    out.push_back(id);
    parent = id;
  }
  stats_.hit_blocks += matched;
  return matched;
}

bool PrefixCache::allocate(size_t n, std::vector<uint32_t>& out) {
  if (n > num_free()) return false;
  while (blocks_.num_free() + freed_.size() < n) evict_one();
  flush_freed();
  size_t first = out.size();
  ACTORD_CHECK(blocks_.allocate(n, out));
  for (size_t i = first; i < out.size(); ++i) {
    uint32_t id = out[i];
    if (id >= nodes_.size()) {
      nodes_.resize(static_cast<size_t>(id) + 1);
      tokens_.resize(nodes_.size() * static_cast<size_t>(block_size_));
    }
    Node& node = nodes_[id];
    ACTORD_CHECK_MSG(node.ref == 0 && !node.cached, "the allocator handed out a block in use");
    ACTORD_CHECK_MSG(!is_root(id), "a block id among the spaces' roots");
    node.ref = 1;
    node.tainted = false;
  }
  return true;
}

void PrefixCache::share(std::span<const uint32_t> blocks) {
  for (uint32_t id : blocks) {
    ACTORD_CHECK_MSG(known(id) && nodes_[id].ref > 0, "sharing a block nobody holds");
    ++nodes_[id].ref;
  }
}

void PrefixCache::insert(std::span<const int32_t> tokens, std::span<const uint32_t> blocks, uint32_t space) {
  if (!enabled_) return;
  size_t n = std::min(blocks.size(), tokens.size() / static_cast<size_t>(block_size_));
  uint32_t parent = root_of(space);
  for (size_t i = 0; i < n; ++i) {
    uint32_t id = blocks[i];
    ACTORD_CHECK_MSG(known(id) && nodes_[id].ref > 0, "inserting a block the caller does not hold");
    auto chunk = tokens.subspan(i * block_size_, block_size_);
    const Node& b = nodes_[id];
    if (b.cached) {
      ACTORD_CHECK_MSG(b.parent == parent && std::ranges::equal(tokens_of(id), chunk),
                       "a cached block inserted with other content or under another parent");
      parent = id;
      continue;
    }
    if (b.tainted) return;  // forgotten: its KV is not trusted
    uint64_t hash = hash_of(parent, chunk);
    if (find_child(parent, chunk, hash) != kNone) return;  // a twin is cached: this block and the rest stay private
    link(id, parent, chunk, hash);
    parent = id;
  }
}

void PrefixCache::release(std::span<const uint32_t> blocks) {
  ++tick_;
  scratch_.clear();
  for (uint32_t id : blocks) {
    ACTORD_CHECK_MSG(known(id) && nodes_[id].ref > 0, "releasing a block nobody holds");
    Node& n = nodes_[id];
    n.last_used = tick_;  // not in lru_ (it is held): its key may change
    if (--n.ref > 0) continue;
    if (n.cached) {
      ++unreferenced_cached_;
      --node(n.parent).held_children;
      scratch_.push_back(id);
    } else {
      n.tainted = false;
      freed_.push_back(id);
    }
  }
  // Checked after the whole call, so a table may be released in any order.
  for (uint32_t id : scratch_) {
    const Node& n = nodes_[id];
    ACTORD_CHECK_MSG(n.held_children == 0, "a cached block released while a cached child of it is still held");
    if (n.num_children == 0) lru_.insert(lru_key(id));
  }
  flush_freed();
}

void PrefixCache::forget(std::span<const uint32_t> blocks) {
  for (uint32_t id : blocks) {
    if (!known(id)) continue;
    Node& n = nodes_[id];
    if (n.ref > 0) n.tainted = true;  // unlink() clears it when the block goes back to the allocator now
    if (!n.cached) continue;
    // The subtree breadth first (every node after its parent), unlinked in reverse: children first.
    scratch_.clear();
    scratch_.push_back(id);
    for (size_t i = 0; i < scratch_.size(); ++i) {
      for (uint32_t c = nodes_[scratch_[i]].first_child; c != kNone; c = nodes_[c].next_sibling) scratch_.push_back(c);
    }
    for (auto it = scratch_.rbegin(); it != scratch_.rend(); ++it) unlink(*it);
  }
  flush_freed();
}

size_t PrefixCache::num_free() const { return blocks_.num_free() + unreferenced_cached_; }

size_t PrefixCache::num_total() const { return blocks_.num_total(); }

uint32_t PrefixCache::ref_count(uint32_t block) const { return known(block) ? nodes_[block].ref : 0; }

bool PrefixCache::is_cached(uint32_t block) const { return known(block) && nodes_[block].cached; }

}  // namespace actord
