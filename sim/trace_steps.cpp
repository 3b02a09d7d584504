#include "sim/trace_steps.hpp"

#include <nlohmann/json.hpp>

namespace actord::sim {
namespace {

// args[key] when it is an unsigned integer, else 0.
uint64_t count(const nlohmann::json& args, const char* key) {
  const auto v = args.find(key);
  return v != args.end() && v->is_number_unsigned() ? v->get<uint64_t>() : 0;
}

}  // namespace

Result<std::vector<MeasuredStep>> steps_of_trace(const nlohmann::json& trace, uint64_t skip, const std::string& source) {
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array())
    return Error{Errc::invalid_argument, source + ": not a Chrome trace (no traceEvents list)"};
  std::vector<MeasuredStep> steps;
  for (const auto& e : trace["traceEvents"]) {
    if (!e.is_object() || e.value("ph", "") != "X" || e.value("cat", "") != "scheduler") continue;
    if (e.value("name", "") != "step") continue;
    const auto args = e.find("args");
    if (args == e.end() || !args->is_object() || !args->contains("share_us")) continue;
    if (count(*args, "step") <= skip) continue;
    MeasuredStep s;
    s.shape.prefill_tokens = count(*args, "prefill_tokens");
    s.shape.decode_tokens = count(*args, "decode_tokens");
    s.shape.attention_pairs = count(*args, "attention_pairs");
    s.shape.sequences = count(*args, "seqs");
    s.us = double(count(*args, "share_us"));
    steps.push_back(s);
  }
  return steps;
}

}  // namespace actord::sim
