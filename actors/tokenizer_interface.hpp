// The tokenizer actor's typed interface (actors/tokenizer_actor.hpp says what each message does): tokenize_atom
// (TokenizeRequest -> TokenizeResult), route_atom (the router it submits to -> true), submit_atom (SubmitRequest
// from a client, who then receives delta_atom batches), delta_atom (StreamDeltaBatch from a scheduler) and
// cancel_atom (CancelRequest from a client).
#pragma once

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/router_interface.hpp"
#include "comms/atoms.hpp"
#include "comms/wire_msg.hpp"

namespace actord {

using tokenizer_actor = caf::typed_actor<caf::replies_to<tokenize_atom, wire_msg>::with<wire_msg>,
                                         caf::replies_to<route_atom, router_actor>::with<bool>,
                                         caf::reacts_to<submit_atom, wire_msg>,
                                         caf::reacts_to<delta_atom, wire_msg>,
                                         caf::reacts_to<cancel_atom, wire_msg>>;

}  // namespace actord
