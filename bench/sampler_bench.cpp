// BatchSampler::sample_rows at vocab 150,000 (random normal logits, scale 3): greedy, temperature, top-k + top-p,
// top-p, penalties over a 1,000-token history, logprobs 20; at 1, 32 and 256 rows, on pools of 1 and 2 threads.
// Prints the best of several repetitions (the machine is shared) per step and per row. Logits are restored before
// each repetition (penalties and masks change them in place), outside the timing.
// Usage: sampler_bench [vocab] [repetitions] [config name filter]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "executors/cpu/thread_pool.hpp"
#include "executors/sampler.hpp"

using namespace actord;

namespace {

struct Config {
  std::string name;
  SamplingOptions options;
  bool penalties = false;
};

std::vector<Config> configs() {
  std::vector<Config> c;
  SamplingOptions o;
  o.temperature = 0.0f;
  c.push_back({"greedy", o});
  o.temperature = 0.8f;
  c.push_back({"t 0.8", o});
  o.top_p = 0.95f;
  o.top_k = 50;
  c.push_back({"t 0.8 top_p 0.95 top_k 50", o});
  o.top_p = 0.9f;
  o.top_k = 0;
  c.push_back({"t 0.8 top_p 0.9", o});
  SamplingOptions p;
  p.temperature = 0.8f;
  p.repetition_penalty = 1.1f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.5f;
  c.push_back({"t 0.8 + rep/freq/presence", p, true});
  SamplingOptions l;
  l.temperature = 0.8f;
  l.logprobs = 20;
  c.push_back({"t 0.8 + logprobs 20", l});
  return c;
}

// Best wall time of `repetitions` calls to sample_rows over `rows` rows, in milliseconds.
double best_ms(const Config& config, const std::vector<float>& pristine, int vocab, int rows,
               const std::vector<PenaltyHistory>& histories, cpu::ThreadPool& pool, int repetitions) {
  std::vector<float> logits(pristine.begin(), pristine.begin() + size_t(rows) * size_t(vocab));
  std::vector<SamplingOptions> options(static_cast<size_t>(rows), config.options);
  std::vector<SampleRequest> requests(static_cast<size_t>(rows));
  std::vector<SampledToken> out(static_cast<size_t>(rows));
  BatchSampler sampler;
  double best = 1e30;
  for (int rep = 0; rep < repetitions; ++rep) {
    for (int r = 0; r < rows; ++r) {
      options[r].seed = uint64_t(r);
      requests[r] = SampleRequest{&options[r], uint32_t(rep), config.penalties ? &histories[r] : nullptr, {}};
    }
    if (config.penalties) std::copy(pristine.begin(), pristine.begin() + logits.size(), logits.begin());
    const auto start = std::chrono::steady_clock::now();
    sampler.sample_rows(logits.data(), vocab, requests, out, pool);
    const auto stop = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::milli>(stop - start).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int vocab = argc > 1 ? std::atoi(argv[1]) : 150000;
  const int repetitions = argc > 2 ? std::atoi(argv[2]) : 7;
  const std::string filter = argc > 3 ? argv[3] : "";
  const std::vector<int> row_counts{1, 32, 256};
  const int max_rows = *std::max_element(row_counts.begin(), row_counts.end());
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> pristine(static_cast<size_t>(max_rows) * size_t(vocab));
  for (float& l : pristine) l = normal(gen);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  std::vector<PenaltyHistory> histories(static_cast<size_t>(max_rows));
  for (PenaltyHistory& h : histories) {
    std::vector<int32_t> prompt(500);
    for (int32_t& id : prompt) id = token(gen);
    h.add_prompt(prompt);
    for (int i = 0; i < 500; ++i) h.add_output(token(gen) % 2000);  // repeats: a few ids many times
  }
  std::printf("vocab %d, best of %d repetitions\n", vocab, repetitions);
  std::printf("%-28s %6s %8s %12s %12s\n", "config", "rows", "threads", "ms/step", "us/row");
  for (const Config& config : configs()) {
    if (config.name.find(filter) == std::string::npos) continue;
    for (int threads : {1, 2}) {
      cpu::ThreadPool pool(threads);
      for (int rows : row_counts) {
        const double ms = best_ms(config, pristine, vocab, rows, histories, pool, repetitions);
        std::printf("%-28s %6d %8d %12.3f %12.1f\n", config.name.c_str(), rows, threads, ms, ms * 1000.0 / rows);
      }
    }
  }
  return 0;
}
