#include "apps/actord/bench_serve_dataset.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

namespace actord::cli {
namespace {

using json = nlohmann::json;

int draw_length(int len, double ratio, std::mt19937_64& rng) {
  if (ratio <= 0) return len;
  const int lo = std::max(1, static_cast<int>(std::floor(len * (1 - ratio))));
  const int hi = std::max(lo, static_cast<int>(std::ceil(len * (1 + ratio))));
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// The first human/user turn and the turn after it, or nothing when the line has no such pair.
struct Pair {
  std::string prompt;
  std::optional<std::string> reply;
  std::optional<int> output_len;
};

std::optional<std::string> text_of(const json& turn, const char* key) {
  auto it = turn.find(key);
  if (it == turn.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

std::optional<Pair> pair_of(const json& line) {
  if (!line.is_object()) return std::nullopt;
  if (auto prompt = line.find("prompt"); prompt != line.end()) {
    if (!prompt->is_string()) return std::nullopt;
    Pair p{prompt->get<std::string>(), std::nullopt, std::nullopt};
    if (auto len = line.find("output_len"); len != line.end() && len->is_number_integer() && len->get<int64_t>() > 0)
      p.output_len = static_cast<int>(std::min<int64_t>(len->get<int64_t>(), 1 << 20));
    return p;
  }
  // ShareGPT's {"from", "value"} turns or OpenAI's {"role", "content"} ones.
  const bool sharegpt = line.contains("conversations");
  auto turns = line.find(sharegpt ? "conversations" : "messages");
  if (turns == line.end() || !turns->is_array()) return std::nullopt;
  const char* who = sharegpt ? "from" : "role";
  const char* what = sharegpt ? "value" : "content";
  for (size_t i = 0; i < turns->size(); ++i) {
    const json& turn = (*turns)[i];
    if (!turn.is_object()) continue;
    const auto speaker = text_of(turn, who);
    if (!speaker || (*speaker != "human" && *speaker != "user")) continue;
    auto prompt = text_of(turn, what);
    if (!prompt) return std::nullopt;
    Pair p{std::move(*prompt), std::nullopt, std::nullopt};
    if (i + 1 < turns->size() && (*turns)[i + 1].is_object()) p.reply = text_of((*turns)[i + 1], what);
    return p;
  }
  return std::nullopt;
}

}  // namespace

std::vector<BenchRequest> random_requests(const RandomPrompts& spec, std::mt19937_64& rng) {
  std::vector<BenchRequest> requests(static_cast<size_t>(std::max(0, spec.count)));
  std::uniform_int_distribution<int> token(3, std::max(3, spec.vocab - 1));
  for (BenchRequest& r : requests) {
    const int in = draw_length(spec.input_len, spec.range_ratio, rng);
    r.output_len = draw_length(spec.output_len, spec.range_ratio, rng);
    r.prompt_ids.resize(static_cast<size_t>(in));
    for (int32_t& id : r.prompt_ids) id = token(rng);
    r.prompt_tokens = in;
  }
  return requests;
}

Result<std::vector<BenchRequest>> dataset_requests(const DatasetSpec& spec) {
  std::ifstream in(spec.path);
  if (!in) return make_error(Errc::invalid_argument, "--dataset: cannot read " + spec.path);
  std::vector<BenchRequest> usable;
  std::string text;
  for (size_t number = 1; std::getline(in, text) && usable.size() < static_cast<size_t>(spec.count); ++number) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json line = json::parse(text, nullptr, false);
    if (line.is_discarded())
      return make_error(Errc::invalid_argument, spec.path + ":" + std::to_string(number) + ": not a JSON object");
    auto pair = pair_of(line);
    if (!pair) continue;  // no prompt in this line's shape: skipped, as vLLM skips short conversations
    BenchRequest r;
    r.output_len = pair->output_len.value_or(spec.default_output_len);
    if (spec.tokenizer) {
      r.prompt_tokens = static_cast<int>(spec.tokenizer->encode(pair->prompt).size());
      if (!pair->output_len && pair->reply) r.output_len = static_cast<int>(spec.tokenizer->encode(*pair->reply, false).size());
      if (r.prompt_tokens < 4 || r.output_len < 4 || r.prompt_tokens + r.output_len > spec.max_model_len) continue;
    }
    r.prompt_text = std::move(pair->prompt);
    usable.push_back(std::move(r));
  }
  if (usable.empty())
    return make_error(Errc::invalid_argument, "--dataset: " + spec.path + " has no usable prompt (lines need "
                                              "\"conversations\", \"messages\" or \"prompt\")");
  std::vector<BenchRequest> requests;
  requests.reserve(static_cast<size_t>(spec.count));
  for (int i = 0; i < spec.count; ++i) requests.push_back(usable[static_cast<size_t>(i) % usable.size()]);
  return requests;
}

}  // namespace actord::cli
