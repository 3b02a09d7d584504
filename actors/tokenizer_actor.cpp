#include "actors/tokenizer_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <unordered_map>

#include "comms/atoms.hpp"
#include "comms/capnp_codec.hpp"
#include "tokenizer/incremental_detokenizer.hpp"
#include "tokenizer/tokenizer.hpp"

namespace actord {
namespace {

struct tokenizer_state {
  std::shared_ptr<const Tokenizer> tokenizer;
  std::unordered_map<uint64_t, std::unique_ptr<IncrementalDetokenizer>> decoders;  // by request id
  static inline const char* name = "tokenizer";
};

caf::behavior tokenizer_impl(caf::stateful_actor<tokenizer_state>* self, std::shared_ptr<const Tokenizer> tok) {
  self->state.tokenizer = std::move(tok);
  return {
      [=](tokenize_atom, const wire_msg& msg) -> wire_msg {
        WireReader reader(msg);
        auto req = reader.root<wire::TokenizeRequest>();
        auto text = req.getText();
        const auto ids = self->state.tokenizer->encode(std::string_view(text.cStr(), text.size()),
                                                       req.getAddSpecialTokens());
        return build<wire::TokenizeResult>([&](wire::TokenizeResult::Builder out) {
          out.setCorrelationId(req.getCorrelationId());
          auto list = out.initIds(static_cast<uint32_t>(ids.size()));
          for (uint32_t i = 0; i < ids.size(); ++i) list.set(i, ids[i]);
        });
      },
      [=](detok_atom, const wire_msg& msg) -> wire_msg {
        WireReader reader(msg);
        auto req = reader.root<wire::DetokenizeRequest>();
        auto& slot = self->state.decoders[req.getRequestId()];
        if (!slot) slot = std::make_unique<IncrementalDetokenizer>(*self->state.tokenizer);
        const auto ids_in = req.getIds();
        std::string text = slot->push(to_vector<int32_t>(ids_in));
        if (req.getFinal()) {
          text += slot->finish();
          self->state.decoders.erase(req.getRequestId());
        }
        return build<wire::DetokenizeResult>([&](wire::DetokenizeResult::Builder out) {
          out.setCorrelationId(req.getCorrelationId());
          out.setRequestId(req.getRequestId());
          out.setText(text_of(text));
        });
      },
  };
}

}  // namespace

caf::actor spawn_tokenizer(caf::actor_system& system, std::shared_ptr<const Tokenizer> tokenizer) {
  return system.spawn(tokenizer_impl, std::move(tokenizer));
}

}  // namespace actord
