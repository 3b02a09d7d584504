// Which way each chunk of a step's queued launches runs on a device backend (executors/cuda/step_graphs.hpp holds
// the CUDA graphs themselves): pure bookkeeping over chunk signatures, tested in CI without a GPU.
//
// Contract:
// - Signature: a running hash of plain values (pointers, sizes, flags) in the order they are added; equal sequences
//   of values give equal signatures, and a value's size counts (an int 1 and an int64 1 differ). Values must have
//   no padding bytes (their contents would vary).
// - GraphCache::way(signature, graphable): replay where a graph of that signature is kept (marking it used); else
//   capture where the same signature ran one by one before (one that comes once is not worth a graph); else one by
//   one, the signature remembered (at most max_seen, then all forgotten at once). A chunk that may not be graphed
//   runs one by one and leaves no trace.
// - keep(signature) after a capture keeps its graph; where that makes more than max_graphs, it names the least
//   recently used other signature, whose graph the caller drops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace actord::exec {

class Signature {
 public:
  void reset() { value_ = kSeed; }
  uint64_t value() const { return value_; }
  void add(const void* data, size_t bytes);

 private:
  static constexpr uint64_t kSeed = 0xcbf29ce484222325ull;
  uint64_t value_ = kSeed;
};

enum class ChunkWay { replay, capture, one_by_one };

class GraphCache {
 public:
  GraphCache(size_t max_graphs, size_t max_seen) : max_graphs_(max_graphs), max_seen_(max_seen) {}

  ChunkWay way(uint64_t signature, bool graphable);
  std::optional<uint64_t> keep(uint64_t signature);
  size_t graphs() const { return last_use_.size(); }

 private:
  size_t max_graphs_, max_seen_;
  std::unordered_map<uint64_t, long> last_use_;  // kept graphs: signature -> when last used
  std::unordered_set<uint64_t> seen_;            // signatures run one by one
  long uses_ = 0;
};

}  // namespace actord::exec
