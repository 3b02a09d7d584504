// The api actor: the front ends' way into the request path (DESIGN.md §2: api -> tokenizer -> scheduler ->
// tokenizer -> api). Threads that are not actors (an HTTP server's) hand it requests; it submits each to a
// tokenizer actor as itself and calls the request's callback with every delta that comes back.
//
// Contract: ApiClient is thread-safe. submit() registers the callback before the request leaves, so no delta is
// missed; the callback runs on the api actor's thread, one call at a time, and never after the request's last
// event (every sample finished). Requests are spread over the tokenizer actors by id; a request's samples (ids
// id .. id + n - 1) stay on one. Sampling options are passed as they are: the seed must already be set.
#pragma once

#include <caf/fwd.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/stream_event.hpp"
#include "actors/tokenizer_interface.hpp"
#include "comms/wire_msg.hpp"

namespace actord {


class ApiClient {
 public:
  ApiClient(caf::actor_system& system, std::vector<tokenizer_actor> tokenizers);
  ~ApiClient();
  ApiClient(const ApiClient&) = delete;
  ApiClient& operator=(const ApiClient&) = delete;

  // Sends `submit` (a SubmitRequest whose requestId is `id`, for `samples` samples) and calls on_event for each
  // delta of ids id .. id + samples - 1 until all have finished.
  void submit(uint64_t id, uint32_t samples, wire_msg submit, StreamCallback on_event);
  // Cancels every sample of request `id` still running (their final events say cancelled).
  void cancel(uint64_t id);
  size_t num_in_flight() const;  // requests with a sample still running

  struct Registry;

 private:
  std::shared_ptr<Registry> registry_;
  std::unique_ptr<caf::actor> actor_;  // the api actor (a handle; caf::actor is only declared here)
};

}  // namespace actord
