#include "apps/actord/load_report.hpp"

#include <algorithm>
#include <cstdio>

#include "apps/actord/commands.hpp"

namespace actord::cli {
namespace {

// mean, median, p90, p99, p999 and max of `seconds`, in milliseconds.
nlohmann::json latency_summary_ms(const std::vector<double>& seconds) {
  double sum = 0;
  for (double s : seconds) sum += s;
  const double mean = seconds.empty() ? 0 : sum / double(seconds.size());
  const double max = seconds.empty() ? 0 : *std::max_element(seconds.begin(), seconds.end());
  return {{"mean", mean * 1e3}, {"median", percentile(seconds, 50) * 1e3}, {"p90", percentile(seconds, 90) * 1e3},
          {"p99", percentile(seconds, 99) * 1e3}, {"p999", percentile(seconds, 99.9) * 1e3}, {"max", max * 1e3}};
}

}  // namespace

void LoadReport::add(double sent, const std::vector<double>& tokens, size_t input_tokens, size_t output_tokens) {
  ++ok_;
  input_tokens_ += input_tokens;
  output_tokens_ += output_tokens;
  ttft_.push_back(tokens.front() - sent);
  e2e_.push_back(tokens.back() - sent);
  for (size_t t = 1; t < tokens.size(); ++t) itl_.push_back(tokens[t] - tokens[t - 1]);
  if (tokens.size() > 1) tpot_.push_back((tokens.back() - tokens.front()) / double(tokens.size() - 1));
  token_times_.insert(token_times_.end(), tokens.begin(), tokens.end());
}

void LoadReport::add_failure(const std::string& why) {
  ++failed_;
  if (first_error_.empty()) first_error_ = why;
}

nlohmann::json LoadReport::json(const BenchServeArgs& args, double wall) const {
  nlohmann::json report{{"dataset", args.dataset.empty() ? "random" : args.dataset},
                        {"num_prompts", args.num_prompts},
                        {"completed", ok_},
                        {"failed", failed_},
                        {"concurrency", args.concurrency},
                        {"request_rate", args.request_rate},
                        {"input_len", args.input_len},
                        {"output_len", args.output_len},
                        {"total_input_tokens", input_tokens_},
                        {"total_output_tokens", output_tokens_},
                        {"duration_s", wall},
                        {"request_throughput", double(ok_) / wall},
                        {"input_tokens_per_s", double(input_tokens_) / wall},
                        {"output_tokens_per_s", double(output_tokens_) / wall},
                        {"ttft_ms", latency_summary_ms(ttft_)},
                        {"tpot_ms", latency_summary_ms(tpot_)},
                        {"itl_ms", latency_summary_ms(itl_)},
                        {"e2e_ms", latency_summary_ms(e2e_)}};
  if (!first_error_.empty()) report["first_error"] = first_error_;
  return report;
}

std::string LoadReport::title(const std::string& head, const BenchServeArgs& args) {
  return head + ", " + std::to_string(args.num_prompts) + " requests (" +
         (args.dataset.empty() ? std::to_string(args.input_len) + " in + " + std::to_string(args.output_len) + " out"
                               : args.dataset) +
         "), concurrency " + std::to_string(args.concurrency) + ", rate " +
         (args.request_rate > 0 ? std::to_string(args.request_rate) : "all at once");
}

void LoadReport::print(const nlohmann::json& r, const std::string& title) {
  std::printf("%s\n", title.c_str());
  std::printf("  %-28s %zu / %zu\n", "completed / failed", r["completed"].get<size_t>(), r["failed"].get<size_t>());
  std::printf("  %-28s %10.2f\n", "duration s", r["duration_s"].get<double>());
  std::printf("  %-28s %10.2f\n", "requests/s", r["request_throughput"].get<double>());
  std::printf("  %-28s %10.1f\n", "input tokens/s", r["input_tokens_per_s"].get<double>());
  std::printf("  %-28s %10.1f\n", "output tokens/s", r["output_tokens_per_s"].get<double>());
  for (const char* name : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
    const nlohmann::json& m = r[name];
    std::printf("  %-28s %10.2f %10.2f %10.2f %10.2f  (mean median p90 p99)\n", name, m["mean"].get<double>(),
                m["median"].get<double>(), m["p90"].get<double>(), m["p99"].get<double>());
  }
  if (r.contains("first_error")) std::printf("  first error: %s\n", r["first_error"].get<std::string>().c_str());
}

}  // namespace actord::cli
