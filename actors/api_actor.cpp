#include "actors/api_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <spdlog/spdlog.h>

#include <mutex>
#include <unordered_map>

#include "comms/atoms.hpp"
#include "comms/capnp_codec.hpp"
#include "comms/codecs.hpp"

namespace actord {

// Requests in flight, shared by the submitting threads and the api actor.
struct ApiClient::Registry {
  struct Request {
    StreamCallback on_event;
    uint64_t first_id = 0;
    uint32_t samples_left = 0;
  };
  mutable std::mutex mutex;
  std::unordered_map<uint64_t, std::shared_ptr<Request>> by_sample;  // every sample id of a request in flight
  size_t in_flight = 0;
};

namespace {

struct api_state {
  std::shared_ptr<ApiClient::Registry> registry;
  std::vector<tokenizer_actor> tokenizers;
  static inline const char* name = "api";
};

using self_ptr = caf::stateful_actor<api_state>*;

StreamEvent event_of(wire::StreamDelta::Reader delta, uint64_t first_id) {
  StreamEvent e;
  e.sample_index = static_cast<uint32_t>(delta.getRequestId() - first_id);
  if (delta.hasPromptIds()) e.prompt_ids = to_vector<int32_t>(delta.getPromptIds());
  e.token_ids = to_vector<int32_t>(delta.getTokenIds());
  e.text = string_of(delta.getText());
  for (auto lp : delta.getLogprobs()) e.logprobs.push_back(from_wire(lp));
  for (auto lp : delta.getPromptLogprobs()) e.prompt_logprobs.push_back(from_wire(lp));
  switch (delta.getFinishReason()) {
    case wire::FinishReason::NONE: break;
    case wire::FinishReason::STOP: e.finish_reason = "stop"; break;
    case wire::FinishReason::LENGTH: e.finish_reason = "length"; break;
    case wire::FinishReason::CANCELLED: e.finish_reason = "cancelled"; break;
    case wire::FinishReason::ERROR: e.finish_reason = "error"; break;
  }
  if (has_error(delta.getError())) e.error = get_error(delta.getError());
  if (delta.getQueueMicros() > 0) e.queue_seconds = double(delta.getQueueMicros()) * 1e-6;
  return e;
}

void on_deltas(self_ptr self, const wire_msg& msg) {
  auto& registry = *self->state.registry;
  WireReader reader(msg);
  for (auto delta : reader.root<wire::StreamDeltaBatch>().getDeltas()) {
    const uint64_t id = delta.getRequestId();
    std::shared_ptr<ApiClient::Registry::Request> request;
    {
      std::lock_guard lock(registry.mutex);
      auto it = registry.by_sample.find(id);
      if (it == registry.by_sample.end()) continue;
      request = it->second;
    }
    const StreamEvent event = event_of(delta, request->first_id);
    if (!event.finish_reason.empty()) {  // forgotten first: whoever the last event wakes sees it finished
      std::lock_guard lock(registry.mutex);
      registry.by_sample.erase(id);
      if (--request->samples_left == 0) --registry.in_flight;
    }
    request->on_event(event);
  }
}

caf::behavior api_impl(self_ptr self, std::shared_ptr<ApiClient::Registry> registry,
                       std::vector<tokenizer_actor> tokenizers) {
  self->state.registry = std::move(registry);
  self->state.tokenizers = std::move(tokenizers);
  auto tokenizer_of = [self](uint64_t id) -> const tokenizer_actor& {
    return self->state.tokenizers[id % self->state.tokenizers.size()];
  };
  return {
      // From ApiClient::submit, anonymously: passed on as this actor's, so the deltas come back here.
      [=](submit_atom, uint64_t id, const wire_msg& msg) { self->send(tokenizer_of(id), submit_atom::value, msg); },
      [=](cancel_atom, uint64_t id, const wire_msg& msg) { self->send(tokenizer_of(id), cancel_atom::value, msg); },
      [=](delta_atom, const wire_msg& msg) {
        try {
          on_deltas(self, msg);
        } catch (const std::exception& e) {
          spdlog::error("api: malformed StreamDeltaBatch dropped: {}", e.what());
        }
      },
  };
}

}  // namespace

ApiClient::ApiClient(caf::actor_system& system, std::vector<tokenizer_actor> tokenizers)
    : registry_(std::make_shared<Registry>()),
      actor_(std::make_unique<caf::actor>(system.spawn(api_impl, registry_, std::move(tokenizers)))) {}

ApiClient::~ApiClient() { caf::anon_send_exit(*actor_, caf::exit_reason::user_shutdown); }

void ApiClient::submit(uint64_t id, uint32_t samples, wire_msg submit, StreamCallback on_event) {
  auto request = std::make_shared<Registry::Request>();
  request->on_event = std::move(on_event);
  request->first_id = id;
  request->samples_left = samples;
  {
    std::lock_guard lock(registry_->mutex);
    for (uint32_t s = 0; s < samples; ++s) registry_->by_sample[id + s] = request;
    ++registry_->in_flight;
  }
  caf::anon_send(*actor_, submit_atom::value, id, std::move(submit));
}

void ApiClient::cancel(uint64_t id) {
  caf::anon_send(*actor_, cancel_atom::value, id,
                 build<wire::CancelRequest>([&](wire::CancelRequest::Builder c) { c.setRequestId(id); }));
}

size_t ApiClient::num_in_flight() const {
  std::lock_guard lock(registry_->mutex);
  return registry_->in_flight;
}

}  // namespace actord
