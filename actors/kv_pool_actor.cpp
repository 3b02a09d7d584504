#include "actors/kv_pool_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "comms/atoms.hpp"
#include "comms/capnp_codec.hpp"
#include "memory/block_allocator.hpp"

#include <algorithm>

namespace actord {
namespace {

struct kv_pool_state {
  BlockAllocator blocks;
  uint32_t block_size = 16;
  static inline const char* name = "kv_pool";
};

kv_pool_actor::behavior_type kv_pool_impl(kv_pool_actor::stateful_pointer<kv_pool_state> self, uint32_t num_blocks,
                                          uint32_t block_size) {
  self->state.blocks = BlockAllocator(num_blocks);
  self->state.block_size = block_size;
  return {
      [=](lease_atom, const wire_msg& msg) -> wire_msg {
        WireReader reader(msg);
        auto req = reader.root<wire::KvLeaseRequest>();
        auto& pool = self->state.blocks;
        // Up to what was asked: a short grant tells the holder the pool is (nearly) exhausted.
        const size_t asked = req.getNumBlocks() == 0 ? pool.num_free() : req.getNumBlocks();
        std::vector<uint32_t> granted;
        pool.allocate(std::min(asked, pool.num_free()), granted);
        return build<wire::KvLeaseGrant>([&](wire::KvLeaseGrant::Builder out) {
          out.setCorrelationId(req.getCorrelationId());
          out.setBlockSize(self->state.block_size);
          auto ids = out.initBlockIds(static_cast<uint32_t>(granted.size()));
          for (uint32_t i = 0; i < granted.size(); ++i) ids.set(i, granted[i]);
        });
      },
      [=](release_atom, const wire_msg& msg) {
        WireReader reader(msg);
        auto ids = reader.root<wire::KvRelease>().getBlockIds();
        self->state.blocks.free(to_vector<uint32_t>(ids));
      },
  };
}

}  // namespace

kv_pool_actor spawn_kv_pool(caf::actor_system& system, uint32_t num_blocks, uint32_t block_size) {
  return system.spawn(kv_pool_impl, num_blocks, block_size);
}

}  // namespace actord
