// The tokenizer actor: encodes prompts and turns each request's generated ids into text on the way from the
// scheduler to the client (DESIGN.md §2: api -> tokenizer -> scheduler -> tokenizer -> api).
//
// Messages:
// - (tokenize_atom, TokenizeRequest) -> (wire_msg TokenizeResult).
// - (route_atom, scheduler) -> bool: where this actor submits requests (sent once the scheduler exists).
// - (submit_atom, SubmitRequest) from a client: the prompt is encoded when it comes as text (BOS added), the model's
//   end-of-sequence ids are added to stopIds, and the request goes on to the scheduler as this actor's. The client
//   then receives (delta_atom, StreamDeltaBatch): every StreamDelta of the scheduler for its samples, with `text`
//   (incremental detokenization, stop strings applied) and, in each sample's first delta, `promptIds`. A stop
//   string ends a sample here (finish stop, the text before it) and cancels it in the scheduler. One batch per
//   client per scheduler batch: no round trip per token.
// - (cancel_atom, CancelRequest) from a client: cancels every sample of the request still running.
// - (delta_atom, StreamDeltaBatch) from the scheduler.
// Several tokenizer actors may share one Tokenizer (it is immutable); a request lives on the one it was submitted to.
#pragma once

#include <caf/fwd.hpp>
#include <memory>

#include "actors/tokenizer_interface.hpp"

namespace actord {

class Tokenizer;

tokenizer_actor spawn_tokenizer(caf::actor_system& system, std::shared_ptr<const Tokenizer> tokenizer);

}  // namespace actord
