#include "actors/tokenizer_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <unordered_map>

#include "actors/tell.hpp"
#include "comms/atoms.hpp"
#include "comms/capnp_codec.hpp"
#include "core/sampling_options.hpp"
#include "tokenizer/text_stream.hpp"
#include "tokenizer/tokenizer.hpp"

namespace actord {
namespace {

// One sample of a request in flight: its text so far, and who gets it.
struct Sample {
  uint64_t request_id = 0;       // the request's first id (its sample 0)
  TextStream text;
  bool prompt_sent = false;      // its first delta (with the prompt's ids) went out
  bool stopped = false;          // a stop string ended it here; the scheduler's final delta is still to come
};

struct Request {
  caf::actor client;
  std::vector<int32_t> prompt_ids;
  uint32_t num_samples = 1;      // sampling.n: ids first id .. + num_samples - 1
  uint32_t samples_left = 0;     // samples whose final delta has not arrived from the scheduler
};

struct tokenizer_state {
  std::shared_ptr<const Tokenizer> tokenizer;
  router_actor router;                             // where requests go (route_atom)
  std::unordered_map<uint64_t, Request> requests;  // by first id
  std::unordered_map<uint64_t, Sample> samples;    // by sample id
  static inline const char* name = "tokenizer";
};

using self_ptr = tokenizer_actor::stateful_pointer<tokenizer_state>;

wire_msg cancel_request(uint64_t id) {
  return build<wire::CancelRequest>([&](wire::CancelRequest::Builder c) { c.setRequestId(id); });
}

// A request that cannot reach the scheduler ends here: one final delta per sample, with the error.
void refuse(self_ptr self, const caf::actor& client, uint64_t id, uint32_t samples, const Error& error) {
  tell(self, client, delta_atom::value, build<wire::StreamDeltaBatch>([&](wire::StreamDeltaBatch::Builder out) {
               auto deltas = out.initDeltas(samples);
               for (uint32_t s = 0; s < samples; ++s) {
                 deltas[s].setRequestId(id + s);
                 deltas[s].setFinishReason(wire::FinishReason::ERROR);
                 set_error(deltas[s].initError(), error);
               }
             }));
}

// Encodes the prompt when it comes as text, adds the model's end-of-sequence ids, keeps the request's text state
// and passes it on to the scheduler, as this actor: the scheduler's deltas come back here.
void on_submit(self_ptr self, const wire_msg& msg) {
  auto& st = self->state;
  auto client = caf::actor_cast<caf::actor>(self->current_sender());
  WireReader reader(msg);
  auto in = reader.root<wire::SubmitRequest>();
  const uint64_t id = in.getRequestId();
  // An invalid n is refused by the scheduler with one final delta: the request is then one sample here too.
  const uint32_t n = SamplingOptions::samples_of(in.getSampling().getN());
  if (!st.router) return refuse(self, client, id, n, Error{Errc::internal, "the tokenizer has no router to submit to"});
  for (uint32_t s = 0; s < n; ++s) {
    if (st.samples.count(id + s))
      return refuse(self, client, id, n, Error{Errc::invalid_argument, "request id " + std::to_string(id + s) +
                                                                           " is already in use"});
  }
  Request& request = st.requests[id];
  request.client = client;
  request.num_samples = n;
  request.samples_left = n;
  if (in.getTokenizePrompt()) {
    auto text = in.getPromptText();
    request.prompt_ids = st.tokenizer->encode(std::string_view(text.cStr(), text.size()), true);
  } else {
    request.prompt_ids = to_vector<int32_t>(in.getPromptIds());
  }
  std::vector<std::string> stop_strings;
  for (auto s : in.getStopStrings()) stop_strings.push_back(string_of(s));
  for (uint32_t s = 0; s < n; ++s)
    st.samples.emplace(id + s, Sample{id, TextStream(*st.tokenizer, stop_strings, request.prompt_ids)});
  std::vector<int32_t> stop_ids = to_vector<int32_t>(in.getStopIds());
  for (int32_t eos : st.tokenizer->stop_ids())
    if (std::find(stop_ids.begin(), stop_ids.end(), eos) == stop_ids.end()) stop_ids.push_back(eos);
  const size_t words = 64 + request.prompt_ids.size() / 2 + stop_ids.size() / 2;
  self->send(st.router, submit_atom::value, build<wire::SubmitRequest>([&](wire::SubmitRequest::Builder out) {
               out.setCorrelationId(in.getCorrelationId());
               out.setRequestId(id);
               fill_list(out.initPromptIds(static_cast<uint32_t>(request.prompt_ids.size())), request.prompt_ids);
               out.setMaxTokens(in.getMaxTokens());
               out.setSampling(in.getSampling());
               fill_list(out.initStopIds(static_cast<uint32_t>(stop_ids.size())), stop_ids);
               out.setIgnoreEos(in.getIgnoreEos());
               out.setPriority(in.getPriority());
               out.setLora(in.getLora());
             }, static_cast<unsigned>(words)));
}

// The scheduler's deltas: text for each (detokenized incrementally, stop strings applied), then one batch per
// client. A stop string ends the sample here (finish stop) and cancels it in the scheduler, whose last word on it
// is then dropped.
void on_deltas(self_ptr self, const wire_msg& msg) {
  auto& st = self->state;
  WireReader reader(msg);
  auto in = reader.root<wire::StreamDeltaBatch>().getDeltas();
  struct Out {
    uint32_t index;                // into `in`
    std::string text;
    bool stopped;                  // a stop string ended it: finish stop
    const std::vector<int32_t>* prompt_ids;  // the first delta of its sample
  };
  std::vector<std::pair<caf::actor, std::vector<Out>>> by_client;
  std::vector<uint64_t> finished_samples;  // forgotten once the batches are sent (they point into the requests)
  for (uint32_t d = 0; d < in.size(); ++d) {
    auto delta = in[d];
    auto it = st.samples.find(delta.getRequestId());
    if (it == st.samples.end()) continue;  // not ours (should not happen)
    Sample& sample = it->second;
    Request& request = st.requests.at(sample.request_id);
    const bool finished = delta.getFinishReason() != wire::FinishReason::NONE;
    if (!sample.stopped) {
      Out out{d, sample.text.push(to_vector<int32_t>(delta.getTokenIds()), finished), false, nullptr};
      if (!sample.prompt_sent) out.prompt_ids = &request.prompt_ids;
      sample.prompt_sent = true;
      if (sample.text.stopped()) {
        out.stopped = true;
        sample.stopped = true;
        if (!finished) self->send(st.router, cancel_atom::value, cancel_request(it->first));
      }
      auto client = std::find_if(by_client.begin(), by_client.end(),
                                 [&](const auto& c) { return c.first == request.client; });
      if (client == by_client.end()) client = by_client.insert(by_client.end(), {request.client, {}});
      client->second.push_back(std::move(out));
    }
    if (finished) finished_samples.push_back(it->first);
  }
  for (auto& [client, outs] : by_client) {
    size_t words = 16;
    for (const Out& o : outs) words += 16 + o.text.size() / 8 + (o.prompt_ids ? o.prompt_ids->size() / 2 : 0);
    tell(self, client, delta_atom::value, build<wire::StreamDeltaBatch>([&](wire::StreamDeltaBatch::Builder batch) {
                 auto deltas = batch.initDeltas(static_cast<uint32_t>(outs.size()));
                 for (uint32_t k = 0; k < outs.size(); ++k) {
                   deltas.setWithCaveats(k, in[outs[k].index]);
                   auto out = deltas[k];
                   out.setText(text_of(outs[k].text));
                   if (outs[k].stopped) out.setFinishReason(wire::FinishReason::STOP);
                   if (outs[k].prompt_ids) fill_list(out.initPromptIds(static_cast<uint32_t>(outs[k].prompt_ids->size())),
                                                     *outs[k].prompt_ids);
                 }
               }, static_cast<unsigned>(words)));
  }
  for (uint64_t id : finished_samples) {
    auto sample = st.samples.find(id);
    const uint64_t request_id = sample->second.request_id;
    st.samples.erase(sample);
    if (--st.requests.at(request_id).samples_left == 0) st.requests.erase(request_id);
  }
}

tokenizer_actor::behavior_type tokenizer_impl(self_ptr self, std::shared_ptr<const Tokenizer> tok) {
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
      [=](route_atom, const router_actor& router) {
        self->state.router = router;
        return true;
      },
      [=](submit_atom, const wire_msg& msg) {
        try {
          on_submit(self, msg);
        } catch (const std::exception& e) {
          spdlog::warn("tokenizer: malformed SubmitRequest dropped: {}", e.what());
        }
      },
      [=](delta_atom, const wire_msg& msg) {
        try {
          on_deltas(self, msg);
        } catch (const std::exception& e) {
          spdlog::error("tokenizer: malformed StreamDeltaBatch dropped: {}", e.what());
        }
      },
      // A client cancels a request: every sample of it still running.
      [=](cancel_atom, const wire_msg& msg) {
        WireReader reader(msg);
        const uint64_t id = reader.root<wire::CancelRequest>().getRequestId();
        auto& st = self->state;
        auto request = st.requests.find(id);
        if (request == st.requests.end() || !st.router) return;
        for (uint64_t s = id; s < id + request->second.num_samples; ++s) {
          auto sample = st.samples.find(s);
          if (sample != st.samples.end() && !sample->second.stopped)
            self->send(st.router, cancel_atom::value, cancel_request(s));
        }
      },
  };
}

}  // namespace

tokenizer_actor spawn_tokenizer(caf::actor_system& system, std::shared_ptr<const Tokenizer> tokenizer) {
  return system.spawn(tokenizer_impl, std::move(tokenizer));
}

}  // namespace actord
