#include "actors/actor_system_setup.hpp"

#include <caf/all.hpp>

namespace actord {

ActordSystemConfig::ActordSystemConfig(size_t threads) {
  add_message_type<wire_msg>("wire_msg");
  if (threads > 0) set("scheduler.max-threads", threads);
  // Work sharing: idle CAF threads block on a condition variable. Work stealing's idle threads wake every 50 us to
  // poll, which on a machine whose cores all run the compute pool preempts it hundreds of times per step (measured on
  // 2 cores: decode +13% at 1 sequence, +5% at 32, +20% for stories260K at 128).
  set("scheduler.policy", caf::atom("sharing"));
  // Keep CAF from printing its own banner or logging to files.
  set("logger.verbosity", caf::atom("quiet"));
}

}  // namespace actord
