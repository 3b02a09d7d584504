// The figures of a load run, as `actord bench serve` measures them and `actord simulate` predicts them: per request
// when it was sent and when each of its tokens arrived (seconds from the run's start), summed into bench serve's
// report (requests and tokens per second; TTFT, TPOT, ITL and E2E mean, median, p90, p99, p99.9, max) as JSON and
// as its table.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace actord::cli {

struct BenchServeArgs;

class LoadReport {
 public:
  // A request that completed: sent at `sent`, its tokens (or text chunks) at `tokens` (not empty); its input and
  // output token counts.
  void add(double sent, const std::vector<double>& tokens, size_t input_tokens, size_t output_tokens);
  // A request that failed (`why`: the first is reported).
  void add_failure(const std::string& why);

  size_t completed() const { return ok_; }
  size_t failed() const { return failed_; }
  const std::vector<double>& ttft() const { return ttft_; }
  const std::vector<double>& tpot() const { return tpot_; }
  const std::vector<double>& itl() const { return itl_; }
  const std::vector<double>& e2e() const { return e2e_; }
  const std::vector<double>& token_times() const { return token_times_; }  // every token's, from the start

  // bench serve's keys for a run of `wall` seconds under `args`' workload.
  nlohmann::json json(const BenchServeArgs& args, double wall) const;
  // The table: `title`, then the report's lines.
  static void print(const nlohmann::json& report, const std::string& title);
  // "HEAD, N requests (I in + O out | DATASET), concurrency C, rate R": a table's title for `args`' workload.
  static std::string title(const std::string& head, const BenchServeArgs& args);

 private:
  size_t ok_ = 0, failed_ = 0, input_tokens_ = 0, output_tokens_ = 0;
  std::vector<double> ttft_, tpot_, itl_, e2e_, token_times_;
  std::string first_error_;
};

}  // namespace actord::cli
