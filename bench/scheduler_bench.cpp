// The scheduler's own CPU time per step, without actors: BatchScheduler planning, the ExecuteStep message, the
// step's results applied, and the StreamDeltaBatch for the submitter; exactly the work scheduler_actor does between
// two steps, with the next step planned ahead of each result (two in flight). 128 sequences (32-token prompts, 600 generated tokens each, 16-token blocks) decode together; the
// figures are per decode step, averaged over all of them (contexts grow from 33 to 632 tokens). With `drafts` > 0,
// speculative decoding at every batch size with up to that many drafts: the text repeats a 5-token cycle, so every
// sequence drafts in every step and every draft is kept (the most drafting work; no step is planned ahead then).
// Usage: actord_scheduler_bench [sequences] [generated tokens] [drafts]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <vector>

#include "actors/step_messages.hpp"
#include "scheduler/batch_scheduler.hpp"

using namespace actord;

int main(int argc, char** argv) {
  const int seqs = argc > 1 ? std::atoi(argv[1]) : 128;
  const int generate = argc > 2 ? std::atoi(argv[2]) : 600;
  const int drafts = argc > 3 ? std::atoi(argv[3]) : 0;
  auto cycle = [](int pos) { return 7 + pos % 5; };  // the token at each position
  constexpr int kPrompt = 32, kBlock = 16;
  BlockAllocator blocks(static_cast<uint32_t>(seqs * ((kPrompt + generate) / kBlock + 2)));
  SchedulerLimits limits;
  limits.max_num_seqs = seqs;
  limits.max_num_batched_tokens = seqs * kPrompt;
  limits.block_size = kBlock;
  limits.max_model_len = kPrompt + generate + 1;
  if (drafts > 0) limits.speculative = SpeculativeLimits{drafts, 2, 4, 0};
  BatchScheduler scheduler(limits, blocks);
  for (int i = 0; i < seqs; ++i) {
    SequenceRequest r;
    r.id = static_cast<uint64_t>(i + 1);
    for (int p = 0; p < kPrompt; ++p) r.prompt.push_back(drafts > 0 ? cycle(p) : 7);
    r.max_tokens = static_cast<uint32_t>(generate);
    scheduler.add(std::move(r));
  }
  using clock = std::chrono::steady_clock;
  double plan_ns = 0, encode_ns = 0, result_ns = 0, deltas_ns = 0;
  int steps = 0;
  size_t step_bytes = 0;
  std::vector<StepSample> sampled;
  std::vector<const SequenceUpdate*> group;
  // As the scheduler actor runs it with plan_ahead: step N+1 is planned and encoded before step N's result is
  // applied, so two steps are in flight; the sampled ids of each step in flight are remembered to answer it.
  struct Row {
    uint64_t seq_id;
    int predicts;  // the position whose token the row samples
  };
  std::deque<std::vector<Row>> in_flight;
  auto plan_and_encode = [&](double* plan_acc, double* encode_acc) {
    const auto t0 = clock::now();
    const StepPlan* plan = scheduler.plan_step();
    const auto t1 = clock::now();
    if (!plan) return false;
    const wire_msg step = encode_execute_step(*plan, static_cast<uint64_t>(steps + 1));
    const auto t2 = clock::now();
    std::vector<Row> rows;
    for (const PlannedSlice& s : plan->slices)
      for (int j = 0; s.sample && j <= s.drafts; ++j)
        rows.push_back({s.seq_id, s.start_pos + s.num_tokens - s.drafts + j});
    in_flight.push_back(std::move(rows));
    if (plan_acc) *plan_acc += std::chrono::duration<double, std::nano>(t1 - t0).count();
    if (encode_acc) *encode_acc += std::chrono::duration<double, std::nano>(t2 - t1).count();
    step_bytes += step.bytes.size();
    return true;
  };
  plan_and_encode(nullptr, nullptr);  // the prefill step
  for (bool first = true;; first = false) {
    const bool counted = !first;
    plan_and_encode(counted ? &plan_ns : nullptr, counted ? &encode_ns : nullptr);  // ahead, or after a result
    if (in_flight.empty()) break;
    const auto t2 = clock::now();
    sampled.clear();
    for (const Row& row : in_flight.front())
      sampled.push_back(StepSample{row.seq_id, drafts > 0 ? cycle(row.predicts) : 5, std::nullopt});
    in_flight.pop_front();
    const auto updates = scheduler.on_step_result(sampled);
    const auto t3 = clock::now();
    group.clear();
    for (const auto& u : updates) group.push_back(&u);
    const wire_msg deltas = encode_stream_deltas(group, {});
    const auto t4 = clock::now();
    if (!counted) continue;
    result_ns += std::chrono::duration<double, std::nano>(t3 - t2).count();
    deltas_ns += std::chrono::duration<double, std::nano>(t4 - t3).count();
    step_bytes += deltas.bytes.size();
    ++steps;
  }
  const double n = steps > 0 ? steps : 1;
  if (drafts > 0)
    std::printf("drafts: %llu of %llu kept\n", static_cast<unsigned long long>(scheduler.num_accepted_drafts()),
                static_cast<unsigned long long>(scheduler.num_draft_tokens()));
  std::printf("%d sequences, %d decode steps; per step (us): plan %.1f, ExecuteStep %.1f, results %.1f, deltas %.1f, "
              "total %.1f; %.1f KB of messages\n",
              seqs, steps, plan_ns / n / 1e3, encode_ns / n / 1e3, result_ns / n / 1e3, deltas_ns / n / 1e3,
              (plan_ns + encode_ns + result_ns + deltas_ns) / n / 1e3, step_bytes / n / 1e3);
}
