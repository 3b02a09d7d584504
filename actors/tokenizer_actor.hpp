// The tokenizer actor: encodes prompts and detokenizes generated ids incrementally, one decoder per request.
//
// Messages: (tokenize_atom, TokenizeRequest) -> (wire_msg TokenizeResult);
//           (detok_atom, DetokenizeRequest) -> (wire_msg DetokenizeResult). A request with final = true flushes and
//           forgets that request's decoder. Several tokenizer actors may share one Tokenizer (it is immutable); the
//           engine routes all detokenize requests of one request id to the same actor.
#pragma once

#include <caf/fwd.hpp>
#include <memory>

namespace actord {

class Tokenizer;

caf::actor spawn_tokenizer(caf::actor_system& system, std::shared_ptr<const Tokenizer> tokenizer);

}  // namespace actord
