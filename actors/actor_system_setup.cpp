#include "actors/actor_system_setup.hpp"

#include <caf/all.hpp>

namespace actord {

ActordSystemConfig::ActordSystemConfig(size_t threads) {
  add_message_type<wire_msg>("wire_msg");
  if (threads > 0) set("scheduler.max-threads", threads);
  // Keep CAF from printing its own banner or logging to files.
  set("logger.verbosity", caf::atom("quiet"));
}

}  // namespace actord
