// BatchScheduler against a simulated worker under random timelines: requests arrive, steps are planned and their
// results come back in random interleavings (up to three steps in flight), with a KV pool far too small, forks,
// prompt logprobs, shared prefixes, FCFS and priority, preemption by recompute and by swap.
//
// The simulated worker does what the real one does with a plan (worker_core.cpp) on a model whose KV is exact:
// it applies `released`, the block copies and swaps, keeps each sequence's block table from new_blocks, feeds
// from_previous tokens from the previous step's samples, writes each fed token's (token, position) into its KV slot
// and "attends" by hashing every slot of the sequence up to the row. A token is a function of that hash (and the
// seed and sample index when sampling), so an output equals the request's direct computation only if every KV slot
// the sequence reads holds its own tokens: any block lost, shared or overwritten by another sequence shows.
#include <catch2/catch.hpp>
#include <deque>
#include <map>
#include <random>
#include <unordered_map>

#include "scheduler/batch_scheduler.hpp"

using namespace actord;

namespace {

constexpr int32_t kEos = 2;
constexpr int kBlockSize = 16;

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t slot_content(int32_t token, int pos) { return mix((uint64_t(uint32_t(token)) << 32) ^ uint64_t(pos)) | 1; }

// The "hidden state" of the row at the end of `contents` (the KV of positions 0 .. contents.size() - 1).
uint64_t attend(const std::vector<uint64_t>& contents) {
  uint64_t h = 0;
  for (uint64_t c : contents) h = mix(h ^ c);
  return h;
}

// Tokens 2 (EOS) .. 61: about one in 60 draws ends a sequence that does not ignore EOS.
int32_t next_token(uint64_t hidden, const SamplingOptions& o, uint32_t sample_index) {
  if (o.temperature == 0.0f) return 2 + static_cast<int32_t>(hidden % 60);
  return 2 + static_cast<int32_t>(mix(hidden ^ mix(o.seed) ^ (uint64_t(sample_index) << 40)) % 60);
}

float prompt_logprob(uint64_t hidden, int32_t token) {
  return -static_cast<float>(mix(hidden ^ uint64_t(token)) % 10000) / 1000.0f;
}

struct Expected {
  std::vector<int32_t> generated;
  std::vector<float> prompt_logprobs;  // of prompt positions 1 ..
};

// The request computed directly, token after token: what every scheduling of it must give.
Expected directly(const SequenceRequest& r, const SamplingOptions& o) {
  Expected e;
  std::vector<uint64_t> contents;
  for (size_t p = 0; p < r.prompt.size(); ++p) {
    if (p > 0) e.prompt_logprobs.push_back(prompt_logprob(attend(contents), r.prompt[p]));
    contents.push_back(slot_content(r.prompt[p], static_cast<int>(p)));
  }
  for (uint32_t k = 0; k < r.max_tokens; ++k) {
    const int32_t t = next_token(attend(contents), o, k);
    e.generated.push_back(t);
    if (t == kEos && !r.ignore_eos) break;
    contents.push_back(slot_content(t, static_cast<int>(contents.size())));
  }
  return e;
}

struct StepOutput {
  std::vector<StepSample> samples;
  std::vector<StepPromptLogprobs> prompt;
};

class SimulatedWorker {
 public:
  SimulatedWorker(uint32_t pool_blocks, uint32_t swap_blocks)
      : pool_(size_t(pool_blocks) * kBlockSize), host_(size_t(swap_blocks) * kBlockSize) {}

  StepOutput execute(const StepPlan& plan) {
    for (uint64_t id : plan.released) seqs_.erase(id);
    copy(plan.copies, pool_, pool_);
    copy(plan.swap_out, pool_, host_);
    copy(plan.swap_in, host_, pool_);
    StepOutput out;
    std::vector<int32_t> samples;
    for (const PlannedSlice& s : plan.slices) {
      if (s.new_sequence) {
        REQUIRE(s.request != nullptr);
        Seq fresh;
        fresh.sampling = s.request->sampling;
        fresh.prompt_len = static_cast<uint32_t>(s.request->prompt.size() + s.request->resumed.size());
        seqs_[s.seq_id] = std::move(fresh);
      }
      auto found = seqs_.find(s.seq_id);
      REQUIRE(found != seqs_.end());
      Seq& seq = found->second;
      if (s.new_sequence) {
        seq.table.assign(s.block_table.begin(), s.block_table.end());
      } else {
        seq.table.insert(seq.table.end(), s.new_blocks.begin(), s.new_blocks.end());
      }
      // The worker's table (what it was told) is the scheduler's.
      REQUIRE(std::vector<uint32_t>(s.block_table.begin(), s.block_table.end()) == seq.table);
      std::vector<int32_t> fed;
      if (s.from_previous >= 0) {
        REQUIRE(s.num_tokens == 1);
        REQUIRE(static_cast<size_t>(s.from_previous) < previous_samples_.size());
        fed.push_back(previous_samples_[static_cast<size_t>(s.from_previous)]);
      } else {
        REQUIRE(s.tokens.size() == static_cast<size_t>(s.num_tokens));
        fed.assign(s.tokens.begin(), s.tokens.end());
      }
      for (int i = 0; i < s.num_tokens; ++i) slot(seq, s.start_pos + i) = slot_content(fed[size_t(i)], s.start_pos + i);
      if (s.prompt_logprobs_from >= 0) {
        StepPromptLogprobs chunk;
        chunk.seq_id = s.seq_id;
        for (int r = 0; r < s.num_tokens; ++r) {
          const int64_t target = s.start_pos + r + 1;
          if (target < s.prompt_logprobs_from || target >= static_cast<int64_t>(seq.prompt_len)) continue;
          const int32_t token = r + 1 < s.num_tokens ? fed[size_t(r) + 1] : s.next_prompt_token;
          if (chunk.entries.empty()) chunk.first_pos = static_cast<uint32_t>(target);
          TokenLogprobs lp;
          lp.logprob = prompt_logprob(hidden(seq, s.start_pos + r), token);
          chunk.entries.push_back(std::move(lp));
        }
        if (!chunk.entries.empty()) out.prompt.push_back(std::move(chunk));
      }
      if (!s.sample) continue;
      const uint64_t h = hidden(seq, s.start_pos + s.num_tokens - 1);
      const uint32_t forks = std::max<uint32_t>(s.forks, 1);
      for (uint32_t f = 0; f < forks; ++f) {
        const SamplingOptions o = forks > 1 ? seq.sampling.for_sample(f) : seq.sampling;
        const int32_t t = next_token(h, o, s.sample_index);
        out.samples.push_back(StepSample{s.seq_id + f, t, std::nullopt});
        samples.push_back(t);
      }
    }
    previous_samples_ = std::move(samples);
    return out;
  }

 private:
  struct Seq {
    std::vector<uint32_t> table;
    SamplingOptions sampling;
    uint32_t prompt_len = 0;
  };

  uint64_t& slot(Seq& seq, int pos) {
    REQUIRE(static_cast<size_t>(pos / kBlockSize) < seq.table.size());
    const size_t at = size_t(seq.table[size_t(pos / kBlockSize)]) * kBlockSize + size_t(pos % kBlockSize);
    REQUIRE(at < pool_.size());
    return pool_[at];
  }
  uint64_t hidden(Seq& seq, int last_pos) {
    std::vector<uint64_t> contents;
    for (int p = 0; p <= last_pos; ++p) contents.push_back(slot(seq, p));
    return attend(contents);
  }
  static void copy(const std::vector<BlockCopy>& copies, const std::vector<uint64_t>& from, std::vector<uint64_t>& to) {
    for (const BlockCopy& c : copies) {
      REQUIRE(size_t(c.src + 1) * kBlockSize <= from.size());
      REQUIRE(size_t(c.dst + 1) * kBlockSize <= to.size());
      std::copy_n(from.begin() + ptrdiff_t(c.src) * kBlockSize, kBlockSize, to.begin() + ptrdiff_t(c.dst) * kBlockSize);
    }
  }

  std::vector<uint64_t> pool_, host_;
  std::unordered_map<uint64_t, Seq> seqs_;
  std::vector<int32_t> previous_samples_;
};

struct Scenario {
  std::string policy;
  PreemptionMode mode = PreemptionMode::recompute;
  int max_in_flight = 2;
  int max_batched_tokens = 64;
  bool prefix_caching = true;
  uint64_t seed = 1;
};

std::vector<SequenceRequest> random_requests(std::mt19937_64& rng, size_t n) {
  // Prompts share prefixes (one of four bases, cut anywhere), so that the prefix cache finds whole blocks.
  std::uniform_int_distribution<int32_t> token(3, 61);
  std::vector<std::vector<int32_t>> bases(4);
  for (auto& b : bases)
    for (int i = 0; i < 60; ++i) b.push_back(token(rng));
  std::uniform_int_distribution<int> prompt_len(1, 60), output_len(1, 48), cut(0, 60), base(0, 3), priority(0, 3);
  std::vector<SequenceRequest> requests(n);
  for (size_t i = 0; i < n; ++i) {
    SequenceRequest& r = requests[i];
    r.id = 8 * (i + 1);  // ids id + 1 .. id + n - 1 belong to its samples
    const int len = prompt_len(rng), shared = std::min(len, cut(rng));
    const auto& b = bases[size_t(base(rng))];
    r.prompt.assign(b.begin(), b.begin() + shared);
    while (static_cast<int>(r.prompt.size()) < len) r.prompt.push_back(token(rng));
    r.max_tokens = static_cast<uint32_t>(output_len(rng));
    r.sampling.temperature = i % 2 ? 0.8f : 0.0f;
    r.sampling.seed = 1000 + i;
    r.priority = priority(rng);
    r.ignore_eos = i % 3 == 0;
    r.stop_ids = {kEos};
    if (i % 10 == 3) r.sampling.n = 2 + static_cast<uint32_t>(i % 20 == 3);
    if (i % 10 == 5) r.sampling.prompt_logprobs = 0;
  }
  return requests;
}

struct Outcome {
  std::vector<int32_t> generated;
  std::vector<float> prompt_logprobs;
  Finish finish = Finish::none;
  std::string error;
};

void run(const Scenario& sc) {
  INFO("policy " << sc.policy << ", preemption by " << (sc.mode == PreemptionMode::swap ? "swap" : "recompute")
                 << ", " << sc.max_in_flight << " steps in flight, " << sc.max_batched_tokens << " tokens a step, "
                 << (sc.prefix_caching ? "prefix cache" : "no prefix cache") << ", seed " << sc.seed);
  constexpr uint32_t kPoolBlocks = 8, kSwapBlocks = 5;
  std::mt19937_64 rng(sc.seed);
  const auto requests = random_requests(rng, 120);

  SchedulerLimits limits;
  limits.max_num_seqs = 32;
  limits.max_num_batched_tokens = sc.max_batched_tokens;
  limits.block_size = kBlockSize;
  limits.max_model_len = 512;
  limits.vocab_size = 64;
  limits.plan_ahead = sc.max_in_flight > 1;
  limits.enable_prefix_caching = sc.prefix_caching;
  limits.preemption_mode = sc.mode;
  limits.swap_blocks = sc.mode == PreemptionMode::swap ? kSwapBlocks : 0;
  BlockAllocator blocks(kPoolBlocks);
  std::shared_ptr<SchedulingPolicy> policy;
  if (sc.policy == "priority") policy = make_priority_policy();
  BatchScheduler s(limits, blocks, policy);
  if (sc.max_in_flight > 1) s.set_max_steps_in_flight(sc.max_in_flight);
  SimulatedWorker worker(kPoolBlocks, kSwapBlocks);

  std::map<uint64_t, Outcome> outcomes;
  auto take = [&](std::span<const SequenceUpdate> updates) {
    for (const SequenceUpdate& u : updates) {
      Outcome& o = outcomes[u.id];
      REQUIRE(o.finish == Finish::none);  // nothing after a final update
      o.generated.insert(o.generated.end(), u.new_tokens.begin(), u.new_tokens.end());
      if (!u.prompt_logprobs.empty()) {
        REQUIRE(u.prompt_logprobs_from == o.prompt_logprobs.size() + 1);  // in order, each position once
        for (const TokenLogprobs& lp : u.prompt_logprobs) o.prompt_logprobs.push_back(lp.logprob);
      }
      o.finish = u.finish;
      o.error = u.error;
    }
  };

  std::deque<StepOutput> in_flight;
  size_t arrived = 0;
  std::uniform_int_distribution<int> action(0, 9);
  for (int iteration = 0;; ++iteration) {
    REQUIRE(iteration < 200000);
    if (arrived == requests.size() && !s.has_work() && in_flight.empty()) break;
    const int a = action(rng);
    if (arrived < requests.size() && a < 2) {
      auto refused = s.add(requests[arrived++]);
      REQUIRE_FALSE(refused.has_value());
    } else if (a < 6 && static_cast<int>(in_flight.size()) < sc.max_in_flight) {
      if (const StepPlan* plan = s.plan_step()) {
        in_flight.push_back(worker.execute(*plan));
      } else if (in_flight.empty() && arrived == requests.size()) {
        FAIL("nothing in flight, nothing to arrive, and no step planned for the work left");
      }
    } else if (!in_flight.empty()) {
      StepOutput result = std::move(in_flight.front());
      in_flight.pop_front();
      take(s.on_step_result(result.samples, result.prompt));
    }
  }

  size_t mismatches = 0;
  for (const SequenceRequest& r : requests) {
    for (uint32_t f = 0; f < r.sampling.n; ++f) {
      INFO("request " << r.id << " sample " << f << " of " << r.sampling.n << ", prompt " << r.prompt.size()
                      << " tokens, max_tokens " << r.max_tokens);
      const Expected e = directly(r, r.sampling.n > 1 ? r.sampling.for_sample(f) : r.sampling);
      const auto found = outcomes.find(r.id + f);
      REQUIRE(found != outcomes.end());
      const Outcome& o = found->second;
      REQUIRE(o.error.empty());
      CHECK((o.finish == Finish::stop || o.finish == Finish::length));
      CHECK(o.generated == e.generated);
      if (o.generated != e.generated) ++mismatches;
      if (r.sampling.prompt_logprobs >= 0 && f == 0) {
        CHECK(o.prompt_logprobs == e.prompt_logprobs);
        if (o.prompt_logprobs != e.prompt_logprobs) ++mismatches;
      }
    }
  }
  CHECK(mismatches == 0);
  CHECK(s.num_preemptions() > 0);
  if (sc.mode == PreemptionMode::swap) CHECK(s.num_swap_ins() == s.num_swap_outs());
  CHECK(s.swapped_blocks() == 0);
  // Nothing leaked: the whole pool serves one request again.
  SequenceRequest big;
  big.id = 1;
  big.prompt = {5};
  big.max_tokens = kPoolBlocks * kBlockSize - 1;
  big.ignore_eos = true;
  big.sampling.temperature = 0.0f;
  REQUIRE_FALSE(s.add(big).has_value());
  while (s.has_work()) {
    const StepPlan* plan = s.plan_step();
    REQUIRE(plan);
    StepOutput result = worker.execute(*plan);
    take(s.on_step_result(result.samples, result.prompt));
  }
  CHECK(outcomes[1].generated == directly(big, big.sampling).generated);
}

}  // namespace

TEST_CASE("simulated worker - random timelines through a tiny KV pool - every output equals its direct computation",
          "[scheduler][simulation]") {
  uint64_t seed = 1;
  for (const std::string policy : {"fcfs", "priority"})
  for (const PreemptionMode mode : {PreemptionMode::recompute, PreemptionMode::swap})
  for (const int in_flight : {1, 2, 3})
  for (const int tokens : {8, 64})
  for (const bool caching : {false, true})
  for (int repeat = 0; repeat < 3; ++repeat) {
    Scenario sc;
    sc.policy = policy;
    sc.mode = mode;
    sc.max_in_flight = in_flight;
    sc.max_batched_tokens = tokens;
    sc.prefix_caching = caching;
    sc.seed = seed++;
    run(sc);
  }
}
