#include "scheduler/batch_scheduler.hpp"

#include <algorithm>

#include "core/status.hpp"

namespace actord {

const char* finish_name(Finish finish) {
  switch (finish) {
    case Finish::none: return "none";
    case Finish::stop: return "stop";
    case Finish::length: return "length";
    case Finish::error: return "error";
    case Finish::cancelled: return "cancelled";
  }
  return "?";
}

BatchScheduler::BatchScheduler(SchedulerLimits limits, BlockAllocator& blocks) : limits_(limits), blocks_(blocks) {}

std::optional<SequenceUpdate> BatchScheduler::add(SequenceRequest request) {
  SequenceUpdate refused{request.id, {}, Finish::error, {}, Errc::invalid_argument,
                         static_cast<uint32_t>(request.prompt.size()), request.owner};
  if (seqs_.count(request.id)) {
    refused.error = "request id " + std::to_string(request.id) + " is already in use";
    return refused;
  }
  if (request.prompt.empty()) {
    refused.error = "the prompt is empty";
    return refused;
  }
  if (static_cast<int>(request.prompt.size()) > limits_.max_model_len) {
    refused.error = "the prompt has " + std::to_string(request.prompt.size()) +
                    " tokens, more than the context length of " + std::to_string(limits_.max_model_len);
    return refused;
  }
  for (int32_t id : request.prompt) {
    if (id < 0 || (limits_.vocab_size > 0 && id >= limits_.vocab_size)) {
      refused.error = "prompt token id " + std::to_string(id) + " is outside the vocabulary (size " +
                      std::to_string(limits_.vocab_size) + ")";
      return refused;
    }
  }
  const size_t blocks_needed = (request.prompt.size() + limits_.block_size - 1) / limits_.block_size;
  if (blocks_needed > blocks_.num_total()) {
    refused.error = "the prompt needs " + std::to_string(blocks_needed) + " KV blocks, the cache has only " +
                    std::to_string(blocks_.num_total());
    return refused;
  }
  if (request.max_tokens == 0) {
    refused.error = "max_tokens must be at least 1";
    return refused;
  }
  Sequence seq;
  seq.tokens = request.prompt;
  seq.prompt_len = static_cast<uint32_t>(request.prompt.size());
  seq.req = std::move(request);
  const uint64_t id = seq.req.id;
  seqs_.emplace(id, std::move(seq));
  waiting_.push_back(id);
  return std::nullopt;
}

std::optional<SequenceUpdate> BatchScheduler::cancel(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return std::nullopt;
  Sequence& seq = it->second;
  const bool in_step = in_flight_ && std::any_of(plan_.slices.begin(), plan_.slices.end(),
                                                 [&](const PlannedSlice& s) { return s.seq_id == id; });
  if (in_step) {
    seq.cancelled = true;  // finished when the step's result comes back
    return std::nullopt;
  }
  SequenceUpdate update{id, {}, Finish::cancelled, {}, Errc::internal, seq.prompt_len, seq.req.owner};
  release(seq);
  seqs_.erase(it);
  return update;
}

bool BatchScheduler::ensure_blocks(Sequence& seq, int num_tokens) {
  const size_t needed = (static_cast<size_t>(num_tokens) + limits_.block_size - 1) / limits_.block_size;
  if (needed <= seq.blocks.size()) return true;
  return blocks_.allocate(needed - seq.blocks.size(), seq.blocks);
}

void BatchScheduler::release(Sequence& seq) {
  if (!seq.blocks.empty()) blocks_.free(seq.blocks);
  seq.blocks.clear();
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq.req.id), waiting_.end());
  running_.erase(std::remove(running_.begin(), running_.end(), &seq), running_.end());
}

void BatchScheduler::preempt(Sequence& seq) {
  release(seq);
  seq.num_computed = 0;
  waiting_.push_front(seq.req.id);
  ++preemptions_;
}

const PlannedSlice& BatchScheduler::add_slice(Sequence& seq, int chunk) {
  // The step message reads these right after planning: start their (likely) cache misses now, all in parallel.
  __builtin_prefetch(seq.tokens.data() + seq.num_computed);
  for (size_t b = 0; b < seq.blocks.size(); b += 16) __builtin_prefetch(seq.blocks.data() + b);
  PlannedSlice s;
  s.seq_id = seq.req.id;
  s.tokens = std::span<const int32_t>(seq.tokens).subspan(static_cast<size_t>(seq.num_computed), chunk);
  s.start_pos = seq.num_computed;
  s.block_table = seq.blocks;
  s.sample = seq.num_computed + chunk == static_cast<int>(seq.tokens.size());
  s.sampling = seq.req.sampling;
  s.sample_index = seq.generated;
  plan_.slices.push_back(s);
  planned_.push_back(&seq);
  return plan_.slices.back();
}

const StepPlan* BatchScheduler::plan_step() {
  if (in_flight_) return nullptr;
  StepPlan& plan = plan_;
  plan.slices.clear();
  planned_.clear();
  plan.num_tokens = plan.num_prefill_tokens = 0;
  int budget = limits_.max_num_batched_tokens;

  // Running sequences first: one decode token each, or the next chunk of their prefill.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    if (i + 4 < running_.size()) __builtin_prefetch(running_[i + 4]);  // cold after the step's compute
    Sequence& seq = *running_[i];
    const int chunk = std::min(budget, static_cast<int>(seq.tokens.size()) - seq.num_computed);
    bool placed = false;
    while (!(placed = ensure_blocks(seq, seq.num_computed + chunk))) {
      // Preempt the most recently admitted sequence that is not already in this step.
      Sequence* victim = running_.back();
      preempt(*victim);
      if (victim == &seq) break;
    }
    if (!placed) break;  // seq itself was preempted: it was the last one
    const PlannedSlice& slice = add_slice(seq, chunk);
    budget -= chunk;
    plan.num_tokens += chunk;
    if (!(chunk == 1 && slice.sample && seq.generated > 0)) plan.num_prefill_tokens += chunk;
    ++i;
  }

  // Then admit waiting sequences, FCFS, without preempting anyone for them.
  while (!waiting_.empty() && budget > 0 && static_cast<int>(running_.size()) < limits_.max_num_seqs) {
    Sequence& seq = seqs_.at(waiting_.front());
    const int chunk = std::min(budget, static_cast<int>(seq.tokens.size()) - seq.num_computed);
    if (!ensure_blocks(seq, seq.num_computed + chunk)) break;
    waiting_.pop_front();
    running_.push_back(&seq);
    add_slice(seq, chunk);
    budget -= chunk;
    plan.num_tokens += chunk;
    plan.num_prefill_tokens += chunk;
  }

  if (plan.slices.empty()) return nullptr;
  in_flight_ = true;
  return &plan_;
}

int BatchScheduler::max_tokens_held() const {
  const size_t capacity = blocks_.num_total() * static_cast<size_t>(limits_.block_size);
  return static_cast<int>(std::min<size_t>(capacity, static_cast<size_t>(limits_.max_model_len)));
}

std::optional<SequenceUpdate> BatchScheduler::check_finished(Sequence& seq) {
  SequenceUpdate update{seq.req.id, {}, Finish::none, {}, Errc::internal, seq.prompt_len, seq.req.owner};
  if (seq.cancelled) {
    update.finish = Finish::cancelled;
  } else if (seq.generated > 0) {
    const int32_t last = seq.tokens.back();
    const bool stop_id = !seq.req.ignore_eos &&
                         std::find(seq.req.stop_ids.begin(), seq.req.stop_ids.end(), last) != seq.req.stop_ids.end();
    if (stop_id) update.finish = Finish::stop;
    else if (seq.generated >= seq.req.max_tokens || static_cast<int>(seq.tokens.size()) >= max_tokens_held())
      update.finish = Finish::length;
  }
  if (update.finish == Finish::none) return std::nullopt;
  return update;
}

std::vector<SequenceUpdate> BatchScheduler::on_step_result(const std::vector<std::pair<uint64_t, int32_t>>& sampled) {
  ACTORD_CHECK(in_flight_);
  in_flight_ = false;
  std::vector<SequenceUpdate> updates;
  updates.reserve(plan_.slices.size());
  // The sequences come back cold from the step's compute: ask for all of them first, so that their cache misses
  // overlap instead of coming one after the other in the loop below.
  for (Sequence* seq : planned_) __builtin_prefetch(seq);
  for (Sequence* seq : planned_) {
    __builtin_prefetch(seq->tokens.data() + seq->tokens.size(), 1);
    __builtin_prefetch(seq->req.stop_ids.data());
  }
  size_t next_sample = 0;
  for (size_t i = 0; i < plan_.slices.size(); ++i) {
    const PlannedSlice& slice = plan_.slices[i];
    Sequence& seq = *planned_[i];
    SequenceUpdate update{seq.req.id, {}, Finish::none, {}, Errc::internal, seq.prompt_len, seq.req.owner};
    // Planned sequences are never preempted within their step (plan_step only preempts unplanned ones).
    seq.num_computed = slice.start_pos + static_cast<int>(slice.tokens.size());
    if (slice.sample) {
      ACTORD_CHECK(next_sample < sampled.size() && sampled[next_sample].first == slice.seq_id);
      const int32_t token = sampled[next_sample++].second;
      seq.tokens.push_back(token);
      ++seq.generated;
      update.new_tokens.push_back(token);
    }
    if (auto done = check_finished(seq)) {
      done->new_tokens = std::move(update.new_tokens);
      updates.push_back(std::move(*done));
      const uint64_t id = seq.req.id;
      release(seq);
      seqs_.erase(id);
    } else if (!update.new_tokens.empty()) {
      updates.push_back(std::move(update));
    }
  }
  return updates;
}

std::vector<SequenceUpdate> BatchScheduler::on_step_failed(const std::string& error) {
  ACTORD_CHECK(in_flight_);
  in_flight_ = false;
  std::vector<SequenceUpdate> updates;
  for (const PlannedSlice& slice : plan_.slices) {
    auto it = seqs_.find(slice.seq_id);
    if (it == seqs_.end()) continue;
    updates.push_back(SequenceUpdate{slice.seq_id, {}, Finish::error, error, Errc::worker_failed,
                                     it->second.prompt_len, it->second.req.owner});
    release(it->second);
    seqs_.erase(it);
  }
  return updates;
}

}  // namespace actord
