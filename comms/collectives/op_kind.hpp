// The collective operations as the backends tag them, to check that every rank is in the same one.
#pragma once

#include <cstdint>
#include <string>

namespace actord::coll {

enum class OpKind : uint32_t { none = 0, all_reduce, all_gather, reduce_scatter, all_to_all, barrier };

inline const char* op_name(OpKind kind) {
  switch (kind) {
    case OpKind::none: return "nothing";
    case OpKind::all_reduce: return "all_reduce";
    case OpKind::all_gather: return "all_gather";
    case OpKind::reduce_scatter: return "reduce_scatter";
    case OpKind::all_to_all: return "all_to_all";
    case OpKind::barrier: return "barrier";
  }
  return "unknown";
}

// "all_reduce on 1000" (elements or bytes, as the backend counts them); "barrier".
inline std::string describe_op(OpKind kind, uint64_t total) {
  if (kind == OpKind::barrier || kind == OpKind::all_to_all || kind == OpKind::none) return op_name(kind);
  return std::string(op_name(kind)) + " on " + std::to_string(total);
}

}  // namespace actord::coll
