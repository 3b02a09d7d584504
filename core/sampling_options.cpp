#include "core/sampling_options.hpp"

#include <cmath>
#include <string>

namespace actord {
namespace {

std::string num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

Error refuse(const char* field, const std::string& rule, double got) {
  return make_error(Errc::invalid_argument, std::string(field) + ": must be " + rule + ", got " + num(got));
}

}  // namespace

Status SamplingOptions::validate(int vocab_size) const {
  if (!std::isfinite(temperature) || temperature < 0.0f) return refuse("temperature", "finite and >= 0", temperature);
  if (!(top_p > 0.0f && top_p <= 1.0f)) return refuse("top_p", "in (0, 1]", top_p);
  if (top_k < -1) return refuse("top_k", "-1 or 0 (off) or a positive count", top_k);
  if (vocab_size > 0 && top_k > vocab_size)
    return refuse("top_k", "at most the vocabulary size (" + std::to_string(vocab_size) + ")", top_k);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return refuse("min_p", "in [0, 1]", min_p);
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f)
    return refuse("repetition_penalty", "finite and > 0", repetition_penalty);
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    return refuse("frequency_penalty", "in [-2, 2]", frequency_penalty);
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    return refuse("presence_penalty", "in [-2, 2]", presence_penalty);
  if (logprobs < -1 || logprobs > kMaxLogprobs)
    return refuse("logprobs", "at most " + std::to_string(kMaxLogprobs) + " (or -1 for none)", logprobs);
  if (prompt_logprobs < -1 || prompt_logprobs > kMaxLogprobs)
    return refuse("prompt_logprobs", "at most " + std::to_string(kMaxLogprobs) + " (or -1 for none)", prompt_logprobs);
  if (n < 1 || n > kMaxSamples) return refuse("n", "in [1, " + std::to_string(kMaxSamples) + "]", n);
  for (size_t i = 0; i < logit_bias.size(); ++i) {
    const LogitBias& b = logit_bias[i];
    if (b.id < 0 || (vocab_size > 0 && b.id >= vocab_size)) {
      const std::string ids = vocab_size > 0 ? "in [0, " + std::to_string(vocab_size - 1) + "]" : "non-negative";
      return refuse("logit_bias", "keyed by token ids " + ids, b.id);
    }
    if (i > 0 && b.id <= logit_bias[i - 1].id)
      return refuse("logit_bias", "keyed by each token id once, in increasing order", b.id);
    if (!(b.bias >= -kMaxLogitBias && b.bias <= kMaxLogitBias))
      return refuse("logit_bias", "biases in [-100, 100]", b.bias);
  }
  if (response_format == ResponseFormat::json_schema && json_schema.empty())
    return make_error(Errc::invalid_argument, "response_format: json_schema needs a schema");
  if (response_format != ResponseFormat::json_schema && !json_schema.empty())
    return make_error(Errc::invalid_argument, "response_format: a schema is given, but the format is not json_schema");
  if (response_format == ResponseFormat::regex && regex.empty())
    return make_error(Errc::invalid_argument, "response_format: regex needs a pattern");
  if (response_format != ResponseFormat::regex && !regex.empty())
    return make_error(Errc::invalid_argument, "response_format: a pattern is given, but the format is not regex");
  if (response_format == ResponseFormat::grammar && grammar.empty())
    return make_error(Errc::invalid_argument, "response_format: grammar needs a grammar");
  if (response_format != ResponseFormat::grammar && !grammar.empty())
    return make_error(Errc::invalid_argument, "response_format: a grammar is given, but the format is not grammar");
  return {};
}

}  // namespace actord
