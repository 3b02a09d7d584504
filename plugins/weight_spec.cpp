#include "plugins/weight_spec.hpp"

namespace actord {

const char* shard_kind_name(ShardKind kind) {
  switch (kind) {
    case ShardKind::replicated: return "replicated";
    case ShardKind::column: return "column";
    case ShardKind::row: return "row";
    case ShardKind::vocab: return "vocab";
    case ShardKind::expert: return "expert";
  }
  return "?";
}

}  // namespace actord
