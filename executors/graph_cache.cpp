#include "executors/graph_cache.hpp"

#include <algorithm>
#include <cstring>

namespace actord::exec {

void Signature::add(const void* data, size_t bytes) {
  constexpr uint64_t kPrime = 0x100000001b3ull;
  const auto* p = static_cast<const unsigned char*>(data);
  size_t n = bytes;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    value_ = (value_ ^ word) * kPrime;
    p += 8;
    n -= 8;
  }
  uint64_t tail = bytes;  // the value's size, then its last bytes
  for (size_t i = 0; i < n; ++i) tail = (tail << 8) | p[i];
  value_ = (value_ ^ tail) * kPrime;
}

ChunkWay GraphCache::way(uint64_t signature, bool graphable) {
  if (!graphable) return ChunkWay::one_by_one;
  if (auto it = last_use_.find(signature); it != last_use_.end()) {
    it->second = ++uses_;
    return ChunkWay::replay;
  }
  if (seen_.count(signature)) return ChunkWay::capture;
  if (seen_.size() >= max_seen_) seen_.clear();
  seen_.insert(signature);
  return ChunkWay::one_by_one;
}

std::optional<uint64_t> GraphCache::keep(uint64_t signature) {
  seen_.erase(signature);
  last_use_[signature] = ++uses_;
  if (last_use_.size() <= max_graphs_) return std::nullopt;
  auto oldest = last_use_.end();
  for (auto it = last_use_.begin(); it != last_use_.end(); ++it) {
    if (it->first != signature && (oldest == last_use_.end() || it->second < oldest->second)) oldest = it;
  }
  const uint64_t dropped = oldest->first;
  last_use_.erase(oldest);
  return dropped;
}

}  // namespace actord::exec
