// A typed actor's message to an actor known only by a plain handle (a request's owner, a client, the coordinator):
// CAF lets a typed actor send() only to typed handles, so it goes by caf::send_as with the typed actor as its sender
// (the receiver may answer it or read current_sender()).
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_cast.hpp>
#include <caf/send.hpp>

#include <utility>

namespace actord {

template <class Self, class... Ts>
void tell(Self* self, const caf::actor& to, Ts&&... xs) {
  caf::send_as(caf::actor_cast<caf::actor>(self), to, std::forward<Ts>(xs)...);
}

}  // namespace actord
