// The kv_pool actor: owns the table of KV block ids of one attention group and leases blocks to schedulers.
//
// Messages: actors/kv_pool_interface.hpp. A scheduler holds its lease across many steps and allocates from it
// locally, so no step asks the pool.
#pragma once

#include <caf/fwd.hpp>
#include <cstdint>

#include "actors/kv_pool_interface.hpp"

namespace actord {

kv_pool_actor spawn_kv_pool(caf::actor_system& system, uint32_t num_blocks, uint32_t block_size);

}  // namespace actord
