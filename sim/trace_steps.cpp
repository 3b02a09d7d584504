#include "sim/trace_steps.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace actord::sim {
namespace {

// args[key] when it is a non-negative integer, else 0.
uint64_t count(const nlohmann::json& args, const char* key) {
  const auto v = args.find(key);
  if (v == args.end() || !v->is_number_integer()) return 0;
  if (v->is_number_unsigned()) return v->get<uint64_t>();
  return v->get<int64_t>() >= 0 ? uint64_t(v->get<int64_t>()) : 0;
}

// e[key] is the string `want` (false for any other type).
bool is(const nlohmann::json& e, const char* key, const char* want) {
  const auto v = e.find(key);
  return v != e.end() && v->is_string() && v->get_ref<const std::string&>() == want;
}

}  // namespace

Result<std::vector<MeasuredStep>> steps_of_trace(const nlohmann::json& trace, uint64_t skip, const std::string& source,
                                                 const std::vector<std::string>& groups) {
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array())
    return Error{Errc::invalid_argument, source + ": not a Chrome trace (no traceEvents list)"};
  std::vector<MeasuredStep> steps;
  for (const auto& e : trace["traceEvents"]) {
    if (!e.is_object() || !is(e, "ph", "X") || !is(e, "cat", "scheduler") || !is(e, "name", "step")) continue;
    const auto args = e.find("args");
    if (args == e.end() || !args->is_object() || !args->contains("share_us")) continue;
    if (count(*args, "step") <= skip) continue;
    if (!groups.empty() &&
        std::none_of(groups.begin(), groups.end(), [&](const std::string& g) { return is(*args, "group", g.c_str()); }))
      continue;
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
