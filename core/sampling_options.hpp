// Per-request sampling options, as users know them from vLLM and the OpenAI API. One plain struct seen by every
// layer that carries them (engine, scheduler, step messages, worker); comms/ has the one codec to and from the wire.
//
// Contract: validate() is the only gate: a request whose options it refuses never reaches a worker, and the
// message names the field and the rule. Semantics (applied by the worker's sampler, executors/sampler.hpp, in this
// order): tokens a response format rules out masked, logit biases added to the raw logits, repetition / frequency /
// presence penalties, stop ids masked while fewer than min_tokens were generated, then greedy (temperature 0) or
// temperature, min-p, top-k, top-p and a seeded draw (vLLM's order).
// Logprobs are those of the raw logits (log-softmax before any penalty, temperature or filter), as vLLM's default.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.hpp"

namespace actord {

// A value added to one token's logit before anything else (the OpenAI API's logit_bias: -100 bans the token in
// practice, 100 all but forces it).
struct LogitBias {
  int32_t id = 0;
  float bias = 0.0f;
  friend bool operator==(const LogitBias&, const LogitBias&) = default;
};

// What the generated text must be: any text, one JSON object (the OpenAI API's response_format json_object), one
// object or array that a JSON schema admits (json_schema: SamplingOptions::json_schema, structured/json_schema.hpp;
// also what a constrained tool_choice becomes), or a text that a regular expression matches whole (regex:
// SamplingOptions::regex, structured/regex.hpp; vLLM's guided_regex, and guided_choice as the choices' alternation),
// or a sentence of a GBNF grammar (grammar: SamplingOptions::grammar, structured/grammar.hpp; vLLM's guided_grammar,
// llama.cpp's grammar): tokens that cannot continue it are masked before the draw, and the stop ids only come once
// it is complete.
enum class ResponseFormat : uint8_t { text, json_object, json_schema, regex, grammar };

struct SamplingOptions {
  float temperature = 1.0f;          // >= 0; 0: greedy (highest logit, lowest id on ties)
  float top_p = 1.0f;                // (0, 1]; 1: off
  int32_t top_k = 0;                 // 0 or -1: off; else 1..vocab
  uint64_t seed = 0;                 // the draw is keyed by (seed, sample index): the batch does not matter
  float min_p = 0.0f;                // [0, 1]; drop tokens whose probability is below min_p x the highest
  float repetition_penalty = 1.0f;   // > 0; 1: off. Tokens seen in the prompt or the output: logit / r if > 0, else x r
  float frequency_penalty = 0.0f;    // [-2, 2]; logit -= f x (times the token was generated)
  float presence_penalty = 0.0f;     // [-2, 2]; logit -= p if the token was generated at all
  uint32_t min_tokens = 0;           // stop ids cannot be sampled before this many tokens were generated
  int32_t logprobs = -1;             // -1: none; 0: the sampled token's logprob; N (<= kMaxLogprobs): and the top N
  // Samples of the prompt (1..kMaxSamples): they share the prompt's KV and fork at the first sampled token
  // (copy-on-write of the partial last block). Sample i draws with seed + i (for_sample(i)), so sample i equals a
  // request of one sample with that seed.
  uint32_t n = 1;
  // -1: none; 0: the logprob of each prompt token given the ones before it (from the second on); N (<= 20): and the
  // top N there. Such a request does not use the prefix cache (every prompt row must be computed).
  int32_t prompt_logprobs = -1;
  // Token ids in increasing order, each once, biases in [-kMaxLogitBias, kMaxLogitBias]; empty: none.
  std::vector<LogitBias> logit_bias;
  ResponseFormat response_format = ResponseFormat::text;
  // response_format json_schema: the schema's JSON text (compiled where the request enters and by the sampling
  // worker); empty otherwise.
  std::string json_schema;
  // response_format regex: the pattern (compiled where the request enters and by the sampling worker); empty
  // otherwise.
  std::string regex;
  // response_format grammar: the GBNF text (compiled where the request enters and by the sampling worker); empty
  // otherwise.
  std::string grammar;

  static constexpr int32_t kMaxLogprobs = 20;
  static constexpr float kMaxLogitBias = 100.0f;  // as the OpenAI API
  static constexpr uint32_t kMaxSamples = 128;  // as the OpenAI API's n
  // How many samples a request asking for `n` has on the request path: n, or 1 when n is invalid (the scheduler
  // refuses such a request with one error).
  static constexpr uint32_t samples_of(uint32_t n) { return n >= 1 && n <= kMaxSamples ? n : 1; }

  // The options of sample i of n: seed + i, one sample.
  SamplingOptions for_sample(uint32_t i) const {
    SamplingOptions o = *this;
    o.seed = seed + i;
    o.n = 1;
    return o;
  }

  bool greedy() const { return temperature == 0.0f; }
  bool structured() const { return response_format != ResponseFormat::text; }
  // "json_object" / "json_schema" / "regex" / "grammar" / "text": as the OpenAI API (and vLLM, for regex and
  // grammar) names the format.
  const char* response_format_name() const {
    return response_format == ResponseFormat::json_object   ? "json_object"
           : response_format == ResponseFormat::json_schema ? "json_schema"
           : response_format == ResponseFormat::regex       ? "regex"
           : response_format == ResponseFormat::grammar     ? "grammar"
                                                            : "text";
  }
  // The text of a json_schema, regex or grammar format (json_schema, regex or grammar); nullptr for the others.
  const std::string* format_text() const {
    return response_format == ResponseFormat::json_schema ? &json_schema
           : response_format == ResponseFormat::regex     ? &regex
           : response_format == ResponseFormat::grammar   ? &grammar
                                                          : nullptr;
  }
  std::string* format_text() { return const_cast<std::string*>(std::as_const(*this).format_text()); }
  bool has_penalties() const {
    return repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f;
  }
  // Checks every field against its rule; vocab_size > 0 also bounds top_k and the logit_bias ids. The error is
  // invalid_argument and names
  // the field as users write it (`top_p: must be in (0, 1], got 0`).
  Status validate(int vocab_size = 0) const;
};

// The raw log-probabilities of one generated token (when the request asked for logprobs).
struct TokenLogprobs {
  float logprob = 0.0f;
  std::vector<int32_t> top_ids;      // best first, SamplingOptions::logprobs of them
  std::vector<float> top_logprobs;
};

}  // namespace actord
