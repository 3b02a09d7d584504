// The CAF actor_system_config every actord process uses: announces wire_msg so it can travel between actors.
// Include only from .cpp files that build an actor_system (it pulls in CAF's config machinery).
#pragma once

#include <caf/actor_system_config.hpp>

#include "comms/wire_msg.hpp"

namespace actord {

class ActordSystemConfig : public caf::actor_system_config {
 public:
  // threads: CAF scheduler threads; 0 keeps CAF's default (one per core).
  explicit ActordSystemConfig(size_t threads = 0);
};

}  // namespace actord
