// What a front end receives for a request it submitted (Engine::submit): one event per delta of each sample.
// CAF-free.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/sampling_options.hpp"
#include "core/status.hpp"

namespace actord {

// One delta of one sample of a request.
struct StreamEvent {
  uint32_t sample_index = 0;
  std::vector<int32_t> prompt_ids;              // in each sample's first event
  std::vector<int32_t> token_ids;
  std::string text;                             // what these tokens add (stop strings applied)
  std::vector<TokenLogprobs> logprobs;          // one per token when asked for
  std::vector<TokenLogprobs> prompt_logprobs;   // prompt positions 1.. (sample 0; may come in several events)
  std::string finish_reason;                    // empty while it runs; stop | length | cancelled | error
  std::optional<double> queue_seconds;          // once per request (sample 0): arrival at the scheduler -> first step
  std::optional<Error> error;
};
using StreamCallback = std::function<void(const StreamEvent&)>;

}  // namespace actord
