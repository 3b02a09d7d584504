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

void BatchScheduler::prefetch(const Sequence* seq) {
  const char* p = reinterpret_cast<const char*>(seq);
  for (size_t line = 0; line < sizeof(Sequence); line += 64) __builtin_prefetch(p + line);
}

BatchScheduler::BatchScheduler(SchedulerLimits limits, BlockAllocator& blocks,
                               std::shared_ptr<SchedulingPolicy> policy)
    : limits_(limits),
      blocks_(blocks),
      cache_(blocks, limits.block_size, limits.enable_prefix_caching),
      policy_(policy ? std::move(policy) : make_fcfs_policy()),
      swap_space_(limits.preemption_mode == PreemptionMode::swap ? limits.swap_blocks : 0) {
  max_in_flight_ = limits_.plan_ahead ? 2 : 1;
}

void BatchScheduler::set_max_steps_in_flight(int n) {
  max_in_flight_ = limits_.plan_ahead ? std::clamp(n, 1, kMaxStepsInFlight) : 1;
}

std::optional<SequenceUpdate> BatchScheduler::add(SequenceRequest request, std::vector<uint32_t> kv_blocks,
                                                  int kv_tokens) {
  auto refused_update = add_checked(std::move(request), kv_blocks, kv_tokens);
  if (refused_update && !kv_blocks.empty()) cache_.release(kv_blocks);
  return refused_update;
}

std::optional<std::vector<uint32_t>> BatchScheduler::take_blocks(int num_tokens) {
  std::vector<uint32_t> blocks;
  if (!cache_.allocate(blocks_for(num_tokens), blocks)) return std::nullopt;
  return blocks;
}

void BatchScheduler::return_blocks(std::vector<uint32_t>& blocks) {
  if (!blocks.empty()) cache_.release(blocks);
  blocks.clear();
}

std::optional<SequenceUpdate> BatchScheduler::add_checked(SequenceRequest request, std::vector<uint32_t>& kv_blocks,
                                                          int kv_tokens) {
  SequenceUpdate refused;
  refused.id = request.id;
  refused.finish = Finish::error;
  refused.error_code = Errc::invalid_argument;
  refused.prompt_tokens = static_cast<uint32_t>(request.prompt.size());
  refused.owner = request.owner;
  const uint32_t n = request.sampling.n;
  refused.unforked_samples = SamplingOptions::samples_of(n) - 1;
  if (auto valid = request.sampling.validate(limits_.vocab_size); !valid) {
    refused.error = valid.error().message;
    return refused;
  }
  for (uint64_t id = request.id; id < request.id + n; ++id) {
    if (seqs_.count(id) || reserved_ids_.count(id)) {
      refused.unforked_samples = 0;  // the ids are someone else's
      refused.error = "request id " + std::to_string(id) + " is already in use";
      return refused;
    }
  }
  if (request.sampling.structured() && (request.ignore_eos || request.stop_ids.empty())) {
    const std::string format = request.sampling.response_format_name();
    refused.error = request.ignore_eos
                        ? "response_format: " + format + " cannot ignore the end of sequence, which ends the text"
                        : "response_format: " + format + " needs a stop id to end the text, and the request has none";
    return refused;
  }
  if (request.sampling.structured() && limits_.check_response_format) {
    if (auto valid = limits_.check_response_format(request.sampling); !valid) {
      refused.error = valid.error().message;
      return refused;
    }
  }
  if (request.lora > static_cast<uint32_t>(std::max(limits_.num_lora_adapters, 0))) {
    refused.error = "LoRA adapter " + std::to_string(request.lora) + ": the engine serves " +
                    std::to_string(limits_.num_lora_adapters) + " (lora.modules)";
    return refused;
  }
  if (static_cast<int>(n) > limits_.max_num_seqs) {
    refused.error = "n: must be at most engine.max_num_seqs (" + std::to_string(limits_.max_num_seqs) +
                    "): the samples run together, got " + std::to_string(n);
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
  for (const auto* ids : {&request.prompt, &request.resumed}) {
    for (int32_t id : *ids) {
      if (id < 0 || (limits_.vocab_size > 0 && id >= limits_.vocab_size)) {
        refused.error = std::string(ids == &request.prompt ? "prompt" : "resumed") + " token id " +
                        std::to_string(id) + " is outside the vocabulary (size " + std::to_string(limits_.vocab_size) + ")";
        return refused;
      }
    }
  }
  if (!request.resumed.empty()) {
    // A continuation forked already (samples fork at their first token) and has a token left to generate.
    if (n > 1) {
      refused.error = "a continuation (resumed tokens) must be one sample, got n = " + std::to_string(n);
      return refused;
    }
    if (request.resumed.size() >= request.max_tokens ||
        static_cast<int>(request.prompt.size() + request.resumed.size()) >= max_tokens_held()) {
      refused.error = "the continuation has generated " + std::to_string(request.resumed.size()) +
                      " tokens already: nothing is left to generate";
      return refused;
    }
  }
  const size_t blocks_needed = blocks_for(static_cast<int>(request.prompt.size() + request.resumed.size()));
  if (blocks_needed > pool_blocks()) {
    refused.error = "the prompt needs " + std::to_string(blocks_needed) + " KV blocks, the cache has only " +
                    std::to_string(pool_blocks());
    return refused;
  }
  if (request.max_tokens == 0) {
    refused.error = "max_tokens must be at least 1";
    return refused;
  }
  Sequence seq;
  seq.tokens = request.prompt;
  seq.tokens.insert(seq.tokens.end(), request.resumed.begin(), request.resumed.end());
  seq.prompt_len = static_cast<uint32_t>(request.prompt.size());
  seq.generated = static_cast<uint32_t>(request.resumed.size());
  // Prompt logprobs reported before (all of them once a token was generated) are not asked for again.
  seq.prompt_logprobs_reported = seq.generated > 0 ? seq.prompt_len : request.prompt_logprobs_reported;
  seq.prompt_logprobs_planned = std::max<int>(1, static_cast<int>(seq.prompt_logprobs_reported));
  seq.arrival = next_arrival_++;
  if (!kv_blocks.empty() && kv_tokens > 0 && kv_tokens < static_cast<int>(seq.tokens.size()) &&
      blocks_for(kv_tokens) == kv_blocks.size()) {
    seq.blocks = std::move(kv_blocks);
    seq.num_computed = kv_tokens;
    seq.decodes_here = true;
  } else if (!kv_blocks.empty()) {
    cache_.release(kv_blocks);
    kv_blocks.clear();
  }
  seq.decodes_here = seq.decodes_here || n > 1;
  seq.req = std::move(request);
  const uint64_t id = seq.req.id;
  for (uint64_t i = 1; i < n; ++i) reserved_ids_.insert(id + i);
  seqs_.emplace(id, std::move(seq));
  waiting_.push_back(id);
  return std::nullopt;
}

std::optional<SequenceUpdate> BatchScheduler::cancel(uint64_t id) {
  auto it = seqs_.find(id);
  // One handed off goes on elsewhere: the router ends it there (it remembers recent cancels).
  if (it == seqs_.end() || it->second.finished || it->second.leaving) return std::nullopt;
  Sequence& seq = it->second;
  if (seq.in_flight > 0) {
    seq.cancelled = true;  // finished when its step's result comes back
    return std::nullopt;
  }
  SequenceUpdate update;
  update.id = id;
  update.prompt_tokens = seq.prompt_len;
  update.owner = seq.req.owner;
  finish_update(seq, update, Finish::cancelled);
  release(seq);
  erase(seq);
  return update;
}

void BatchScheduler::finish_update(Sequence& seq, SequenceUpdate& update, Finish finish) {
  update.finish = finish;
  const uint32_t n = seq.req.sampling.n;
  if (n > 1) {
    update.unforked_samples = n - 1;
    for (uint64_t i = 1; i < n; ++i) reserved_ids_.erase(seq.req.id + i);
  }
}

SequenceUpdate& UpdateList::add(uint64_t id, uint32_t prompt_tokens, uint32_t owner) {
  if (size_ == items_.size()) items_.emplace_back();
  SequenceUpdate& u = items_[size_++];
  u.id = id;
  u.new_tokens.clear();
  u.finish = Finish::none;
  u.error.clear();
  u.error_code = Errc::internal;
  u.prompt_tokens = prompt_tokens;
  u.owner = owner;
  u.logprobs.clear();
  u.unforked_samples = 0;
  u.prompt_logprobs.clear();
  u.prompt_logprobs_from = 0;
  return u;
}

void BatchScheduler::remove_from_running(Sequence& seq) {
  auto it = std::find(running_.begin(), running_.end(), &seq);
  if (it == running_.end()) return;
  running_.erase(it);
  if (seq.req.sampling.n > 1) fork_seats_ -= static_cast<int>(seq.req.sampling.n) - 1;
}

bool BatchScheduler::ensure_blocks(Sequence& seq, int num_tokens) {
  const size_t needed = blocks_for(num_tokens);
  if (needed <= seq.blocks.size()) return true;
  return cache_.allocate(needed - seq.blocks.size(), seq.blocks);
}

void BatchScheduler::release(Sequence& seq) {
  if (!seq.blocks.empty()) cache_.release(seq.blocks);
  seq.blocks.clear();
  if (!seq.host_blocks.empty()) swap_space_.free(seq.host_blocks);
  seq.host_blocks.clear();
  if (seq.sent) released_.push_back(seq.req.id);
  seq.sent = false;
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq.req.id), waiting_.end());
  remove_from_running(seq);
}

void BatchScheduler::erase(Sequence& seq) { seqs_.erase(seq.req.id); }

void BatchScheduler::retire(Sequence& seq) {
  seq.finished = true;
  remove_from_running(seq);
  if (seq.in_flight == 0) {
    release(seq);
    erase(seq);
  }
}

void BatchScheduler::preempt(Sequence& seq) {
  ACTORD_CHECK(seq.in_flight == 0 && seq.pending == 0);
  const size_t computed = blocks_for(seq.num_computed);
  const bool swap = limits_.preemption_mode == PreemptionMode::swap && computed > 0 &&
                    swap_space_.num_free() >= computed;
  std::vector<uint32_t> blocks;
  if (swap) blocks.assign(seq.blocks.begin(), seq.blocks.begin() + static_cast<ptrdiff_t>(computed));
  release(seq);
  if (swap) {
    // The blocks are free for this scheduler now: the copies go in the next step sent, before anything it writes.
    swap_space_.allocate(computed, seq.host_blocks);
    for (size_t i = 0; i < computed; ++i) swap_out_.push_back(BlockCopy{blocks[i], seq.host_blocks[i]});
    ++swap_outs_;
  } else {
    seq.num_computed = 0;
  }
  seq.fresh = true;
  waiting_.push_front(seq.req.id);
  ++preemptions_;
}

bool BatchScheduler::ends_by_length_after_pending(const Sequence& seq) const {
  return seq.generated + static_cast<uint32_t>(seq.pending) >= seq.req.max_tokens ||
         static_cast<int>(seq.tokens.size()) + seq.pending >= max_tokens_held();
}

bool BatchScheduler::speculation_allows_ahead() const {
  const Step& newest = steps_[(head_ + in_flight_ - 1) % kMaxStepsInFlight];
  if (newest.plan.num_drafts > 0) return false;
  for (const Sequence* seq : newest.seqs)
    if (seq->wants_drafts) return false;
  return true;
}

void BatchScheduler::note_draftable(Sequence& seq) {
  seq.wants_drafts = false;
  if (!may_draft(seq)) return;
  look_up_drafts(seq, 1);
  seq.wants_drafts = !drafts_.empty();
}

void BatchScheduler::look_up_drafts(Sequence& seq, int max_drafts) {
  if (!seq.drafter)
    seq.drafter = std::make_unique<NgramDrafter>(limits_.speculative.lookup_min, limits_.speculative.lookup_max);
  seq.drafter->propose(seq.tokens, max_drafts, drafts_);
}

bool BatchScheduler::hands_off(const Sequence& seq) const {
  return limits_.hand_off_prefilled && !seq.decodes_here;
}

bool BatchScheduler::may_draft(const Sequence& seq) const {
  const SpeculativeLimits& spec = limits_.speculative;
  if (!spec.enabled() || seq.generated == 0 || seq.req.sampling.n > 1 || hands_off(seq)) return false;
  return spec.disable_by_batch_size == 0 || running_.size() < static_cast<size_t>(spec.disable_by_batch_size);
}

int BatchScheduler::propose_drafts(Sequence& seq, int budget) {
  seq.wants_drafts = false;
  if (!may_draft(seq)) return 0;
  const SpeculativeLimits& spec = limits_.speculative;
  // Every draft kept is a token generated, and the sample after the last one is another: no more than max_tokens
  // and the context (or the lease) hold.
  int room = std::min(spec.num_tokens, budget - 1);
  room = std::min(room, static_cast<int>(seq.req.max_tokens) - static_cast<int>(seq.generated) - 1);
  room = std::min(room, max_tokens_held() - static_cast<int>(seq.tokens.size()) - 1);
  if (room <= 0) return 0;
  look_up_drafts(seq, room);
  const int drafts = static_cast<int>(drafts_.size());
  // Drafts never preempt anyone: without blocks for them the sequence decodes one token.
  if (drafts == 0 || !ensure_blocks(seq, seq.num_computed + 1 + drafts)) return 0;
  seq.fed.assign(1, seq.tokens.back());
  seq.fed.insert(seq.fed.end(), drafts_.begin(), drafts_.end());
  seq.wants_drafts = true;
  return drafts;
}

void BatchScheduler::add_slice(Step& step, Sequence& seq, int chunk, int32_t from_previous, int drafts) {
  // The step message reads these right after planning: start their (likely) cache misses now, all in parallel.
  if (from_previous < 0) __builtin_prefetch(seq.tokens.data() + seq.num_computed);
  for (size_t b = seq.fresh ? 0 : seq.blocks_sent; b < seq.blocks.size(); b += 16)
    __builtin_prefetch(seq.blocks.data() + b);
  PlannedSlice s;
  s.seq_id = seq.req.id;
  s.num_tokens = chunk;
  s.start_pos = seq.num_computed;
  if (drafts > 0) {
    s.tokens = seq.fed;
    s.sample = true;
    s.drafts = drafts;
  } else if (from_previous < 0) {
    s.tokens = std::span<const int32_t>(seq.tokens).subspan(static_cast<size_t>(seq.num_computed), chunk);
    s.sample = seq.num_computed + chunk == static_cast<int>(seq.tokens.size());
  } else {
    s.sample = true;
    s.from_previous = from_previous;
  }
  s.block_table = seq.blocks;
  s.new_blocks = std::span<const uint32_t>(seq.blocks).subspan(seq.fresh ? 0 : seq.blocks_sent);
  s.sample_index = seq.generated + static_cast<uint32_t>(seq.pending);
  s.new_sequence = seq.fresh;
  s.request = &seq.req;
  if (s.sample && seq.req.sampling.n > 1) s.forks = seq.req.sampling.n;
  const int prompt_len = static_cast<int>(seq.prompt_len);
  if (seq.req.sampling.prompt_logprobs >= 0 && from_previous < 0 && seq.prompt_logprobs_planned < prompt_len &&
      s.start_pos + chunk >= seq.prompt_logprobs_planned) {
    s.prompt_logprobs_from = seq.prompt_logprobs_planned;
    if (s.start_pos + chunk < prompt_len) s.next_prompt_token = seq.tokens[static_cast<size_t>(s.start_pos + chunk)];
  }
  if (seq.fresh) s.context = std::span<const int32_t>(seq.tokens).first(static_cast<size_t>(seq.num_computed));
  StepPlan& plan = step.plan;
  plan.num_tokens += chunk;
  plan.num_drafts += drafts;
  const bool decode = (chunk == 1 || drafts > 0) && s.sample && (from_previous >= 0 || seq.generated > 0);
  if (!decode) plan.num_prefill_tokens += chunk;
  plan.slices.push_back(s);
  step.seqs.push_back(&seq);
}

void BatchScheduler::commit(Step& step) {
  int32_t sample_slot = 0;
  for (size_t i = 0; i < step.seqs.size(); ++i) {
    const PlannedSlice& slice = step.plan.slices[i];
    Sequence& seq = *step.seqs[i];
    seq.num_computed = slice.start_pos + slice.num_tokens;
    ++seq.in_flight;
    seq.sent = true;
    seq.fresh = false;
    seq.blocks_sent = seq.blocks.size();
    if (slice.prompt_logprobs_from >= 0)
      seq.prompt_logprobs_planned = std::min<int>(slice.start_pos + slice.num_tokens, static_cast<int>(seq.prompt_len)) + 1;
    if (slice.sample) {
      ++seq.pending;
      seq.last_sample_slot = sample_slot;
      sample_slot += slice.forks > 1 ? static_cast<int32_t>(slice.forks) : 1 + slice.drafts;
      seq.last_sample_step = next_serial_;
    }
  }
  step.plan.num_samples = sample_slot;
  ++next_serial_;
}

const StepPlan* BatchScheduler::plan_step() {
  if (in_flight_ >= max_in_flight_) return nullptr;
  const bool ahead = in_flight_ > 0;
  if (ahead && needs_sync_) return nullptr;
  if (ahead && limits_.speculative.enabled() && !speculation_allows_ahead()) return nullptr;
  const uint64_t newest_step = next_serial_ - 1;  // the step a placeholder refers to
  Step& step = steps_[(head_ + in_flight_) % kMaxStepsInFlight];
  StepPlan& plan = step.plan;
  plan.slices.clear();
  plan.released.clear();
  plan.swap_out.clear();
  plan.swap_in.clear();
  plan.copies.clear();
  step.seqs.clear();
  plan.num_tokens = plan.num_prefill_tokens = plan.num_samples = plan.num_drafts = 0;
  plan.planned_ahead = ahead;
  shortfall_ = 0;
  int budget = limits_.max_num_batched_tokens;
  // The policy decides first: a preemption it asks for frees room before the running sequences are planned.
  if (!consult_policy(ahead)) {
    needs_sync_ = true;
    return nullptr;
  }

  // Running sequences first: one decode token each (known, or the one sampled in the step in flight), or the next
  // chunk of their prefill.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    if (i + 6 < running_.size()) prefetch(running_[i + 6]);  // cold after the step's compute
    Sequence& seq = *running_[i];
    int chunk = 0;
    int32_t from_previous = -1;
    int drafts = 0;
    if (seq.cancelled) {
      ++i;  // finishes when its step comes back
      continue;
    }
    if (seq.pending > 0) {
      // Only the newest step's samples can be fed: a sequence it does not sample waits for its tokens.
      // A sample that forks the sequence is not planned past: the forks exist only once it is back; nor one after
      // which the sequence hands off.
      if (seq.last_sample_step != newest_step || ends_by_length_after_pending(seq) || seq.req.sampling.n > 1 ||
          hands_off(seq)) {
        ++i;
        continue;
      }
      chunk = 1;
      from_previous = seq.last_sample_slot;
    } else {
      chunk = std::min(budget, static_cast<int>(seq.tokens.size()) - seq.num_computed);
      if (chunk <= 0) {
        ++i;
        continue;
      }
      if (chunk == 1 && !ahead) {
        drafts = propose_drafts(seq, budget);
        chunk += drafts;
      }
    }
    bool placed = ensure_blocks(seq, seq.num_computed + chunk);
    if (!placed) {
      shortfall_ += blocks_for(seq.num_computed + chunk) - seq.blocks.size();
      if (growing_) {  // more blocks are on their way: this sequence waits for them
        ++i;
        continue;
      }
      // Preemption needs every sequence at rest: ahead of a step in flight, give up and plan after its result.
      if (ahead) {
        needs_sync_ = true;
        return nullptr;
      }
      // Preempt the policy's victim among the sequences not already in this step.
      while (!placed) {
        Sequence* victim = pick_victim(i);
        preempt(*victim);
        if (victim == &seq) break;
        placed = ensure_blocks(seq, seq.num_computed + chunk);
      }
    }
    if (!placed) continue;  // seq itself was the victim: running_[i] is now the next one
    add_slice(step, seq, chunk, from_previous, drafts);
    budget -= chunk;
    ++i;
  }

  // Then admit waiting sequences in the policy's order.
  admit(step, budget);

  if (plan.slices.empty()) return nullptr;  // released_, swap_out_ and copies_ wait for the next plan
  plan.released.swap(released_);
  released_.clear();
  plan.swap_out.swap(swap_out_);
  swap_out_.clear();
  plan.copies.swap(copies_);
  copies_.clear();
  commit(step);
  ++in_flight_;
  if (!ahead) needs_sync_ = false;
  return &plan;
}

PolicySequence BatchScheduler::view_of(const Sequence& seq) const {
  PolicySequence v;
  v.id = seq.req.id;
  v.priority = seq.req.priority;
  v.arrival = seq.arrival;
  v.prompt_len = seq.prompt_len;
  v.num_tokens = static_cast<uint32_t>(seq.tokens.size()) + static_cast<uint32_t>(seq.pending);
  v.max_tokens = seq.req.max_tokens;
  v.blocks_held = static_cast<uint32_t>(seq.blocks.size());
  v.blocks_needed = static_cast<uint32_t>(blocks_for(static_cast<int>(v.num_tokens)));
  return v;
}

bool BatchScheduler::consult_policy(bool ahead) {
  decision_.clear();
  if (waiting_.empty()) return true;
  waiting_view_.clear();
  running_view_.clear();
  swapped_view_.clear();
  for (uint64_t id : waiting_) {
    const Sequence& seq = seqs_.at(id);
    waiting_view_.push_back(view_of(seq));
    if (!seq.host_blocks.empty()) swapped_view_.push_back(waiting_view_.back());
  }
  for (const Sequence* seq : running_) running_view_.push_back(view_of(*seq));
  PolicySnapshot snapshot;
  snapshot.waiting = waiting_view_;
  snapshot.running = running_view_;
  snapshot.swapped = swapped_view_;
  snapshot.preemption_mode = limits_.preemption_mode;
  snapshot.swap_free_blocks = swap_space_.num_free();
  snapshot.free_blocks = cache_.num_free();
  snapshot.total_blocks = blocks_.num_total();
  snapshot.token_budget = limits_.max_num_batched_tokens;
  snapshot.max_num_seqs = limits_.max_num_seqs;
  policy_->decide(snapshot, decision_);
  if (decision_.preempt.empty()) return true;
  if (ahead) return false;
  for (uint64_t id : decision_.preempt) {
    auto it = seqs_.find(id);
    if (it == seqs_.end() || it->second.finished || it->second.in_flight > 0) continue;
    if (std::find(running_.begin(), running_.end(), &it->second) == running_.end()) continue;
    preempt(it->second);
  }
  return true;
}

BatchScheduler::Sequence* BatchScheduler::pick_victim(size_t first) {
  running_view_.clear();
  for (size_t i = first; i < running_.size(); ++i) running_view_.push_back(view_of(*running_[i]));
  const size_t pick = policy_->victim(running_view_);
  return running_[first + std::min(pick, running_view_.size() - 1)];
}

void BatchScheduler::admit(Step& step, int& budget) {
  for (uint64_t id : decision_.admit) {
    if (budget <= 0 || static_cast<int>(running_.size()) + fork_seats_ >= limits_.max_num_seqs) break;
    auto it = seqs_.find(id);
    if (it == seqs_.end()) continue;
    Sequence& seq = it->second;
    const int seats = static_cast<int>(seq.req.sampling.n);
    if (static_cast<int>(running_.size()) + fork_seats_ + seats > limits_.max_num_seqs) break;
    auto queued = std::find(waiting_.begin(), waiting_.end(), id);
    if (queued == waiting_.end()) continue;  // preempted for it, or not waiting
    const bool swapped = !seq.host_blocks.empty();
    // Prompt logprobs need every prompt row computed: no cached prefix for them.
    if (seq.fresh && seq.blocks.empty() && !swapped && seq.req.sampling.prompt_logprobs < 0) reuse_cached_prefix(seq);
    const int chunk = std::min(budget, static_cast<int>(seq.tokens.size()) - seq.num_computed);
    if (swapped ? !swap_in(step, seq, chunk) : !ensure_blocks(seq, seq.num_computed + chunk)) {
      shortfall_ += blocks_for(static_cast<int>(seq.tokens.size())) - seq.blocks.size();
      // A waiting sequence holds no blocks: the cached prefix it matched goes back (evictable again, and matched
      // anew when it is admitted), or sequences queued behind full blocks could starve the pool.
      if (!seq.blocks.empty()) {
        shortfall_ += seq.blocks.size();
        cache_.release(seq.blocks);
        seq.blocks.clear();
        seq.num_computed = 0;
      }
      break;
    }
    waiting_.erase(queued);
    running_.push_back(&seq);
    fork_seats_ += seats - 1;
    add_slice(step, seq, chunk, -1);
    budget -= chunk;
  }
}

bool BatchScheduler::swap_in(Step& step, Sequence& seq, int chunk) {
  if (!ensure_blocks(seq, seq.num_computed + chunk)) return false;
  ACTORD_CHECK(seq.blocks.size() >= seq.host_blocks.size());
  for (size_t i = 0; i < seq.host_blocks.size(); ++i)
    step.plan.swap_in.push_back(BlockCopy{seq.host_blocks[i], seq.blocks[i]});
  // The host blocks may take another swap-out from the next step on: the worker copies in step order.
  swap_space_.free(seq.host_blocks);
  seq.host_blocks.clear();
  ++swap_ins_;
  return true;
}

size_t BatchScheduler::blocks_spare() const {
  if (!waiting_.empty() || shortfall_ > 0) return 0;
  // Keep the reserve, and two blocks per running sequence for its next tokens.
  const size_t keep = std::max<size_t>(limits_.lease_reserve, 2 * running_.size());
  const size_t free = blocks_.num_free();
  // Give back only a sizeable surplus, so that a lease does not go back and forth block by block.
  return free > 2 * keep ? free - keep : 0;
}

void BatchScheduler::reuse_cached_prefix(Sequence& seq) {
  if (!cache_.enabled()) return;
  const size_t usable = (seq.tokens.size() - 1) / static_cast<size_t>(limits_.block_size);
  const size_t hit = cache_.match(seq.tokens, usable, seq.blocks, seq.req.lora);
  seq.num_computed = static_cast<int>(hit) * limits_.block_size;
}

void BatchScheduler::cache_full_blocks(Sequence& seq, int written_from, int written_to) {
  const int bs = limits_.block_size;
  const size_t full = static_cast<size_t>(written_to / bs);
  if (!cache_.enabled() || written_to / bs == written_from / bs) return;  // no block filled up
  cache_.insert(std::span<const int32_t>(seq.tokens).first(full * static_cast<size_t>(bs)),
                std::span<const uint32_t>(seq.blocks).first(std::min(full, seq.blocks.size())), seq.req.lora);
}

int BatchScheduler::max_tokens_held() const {
  const size_t capacity = pool_blocks() * static_cast<size_t>(limits_.block_size);
  return static_cast<int>(std::min<size_t>(capacity, static_cast<size_t>(limits_.max_model_len)));
}

Finish BatchScheduler::finish_of(const Sequence& seq) const {
  if (seq.cancelled) return Finish::cancelled;
  if (seq.generated == 0) return Finish::none;
  const int32_t last = seq.tokens.back();
  if (!seq.req.ignore_eos &&
      std::find(seq.req.stop_ids.begin(), seq.req.stop_ids.end(), last) != seq.req.stop_ids.end())
    return Finish::stop;
  if (seq.generated >= seq.req.max_tokens || static_cast<int>(seq.tokens.size()) >= max_tokens_held())
    return Finish::length;
  return Finish::none;
}

BatchScheduler::Step& BatchScheduler::pop_oldest() {
  ACTORD_CHECK(in_flight_ > 0);
  Step& step = steps_[head_];
  head_ = (head_ + 1) % kMaxStepsInFlight;
  --in_flight_;
  return step;
}

std::span<const SequenceUpdate> BatchScheduler::on_step_result(std::span<const StepSample> sampled,
                                                               std::span<StepPromptLogprobs> prompt) {
  Step& step = pop_oldest();
  updates_.reset();
  // The sequences come back cold from the step's compute: ask for all of them first, so that their cache misses
  // overlap instead of coming one after the other in the loop below.
  for (Sequence* seq : step.seqs) prefetch(seq);
  for (Sequence* seq : step.seqs) {
    __builtin_prefetch(seq->tokens.data() + seq->tokens.size(), 1);
    __builtin_prefetch(seq->req.stop_ids.data());
  }
  size_t next_sample = 0, next_prompt = 0;
  for (size_t i = 0; i < step.seqs.size(); ++i) {
    const PlannedSlice& slice = step.plan.slices[i];
    Sequence& seq = *step.seqs[i];
    --seq.in_flight;
    std::span<const StepSample> rows;  // the slice's own samples: one, or one per draft and one more
    std::span<const StepSample> forks;
    if (slice.sample) {
      const size_t count = slice.forks > 1 ? slice.forks : static_cast<size_t>(1 + slice.drafts);
      ACTORD_CHECK(next_sample + count <= sampled.size() && sampled[next_sample].seq_id == slice.seq_id);
      rows = sampled.subspan(next_sample, slice.forks > 1 ? 1 : count);
      forks = sampled.subspan(next_sample + 1, slice.forks > 1 ? count - 1 : 0);
      next_sample += count;
      --seq.pending;
    }
    // Speculative decoding: the drafts kept are those the samples confirm, in order, and the sample after them is
    // the next token; the KV of the rest is no longer counted as computed.
    int accepted = 0;
    if (slice.drafts > 0) {
      while (accepted < slice.drafts &&
             rows[static_cast<size_t>(accepted)].token == slice.tokens[static_cast<size_t>(accepted) + 1])
        ++accepted;
      rows = rows.first(static_cast<size_t>(accepted) + 1);
      seq.num_computed -= slice.drafts - accepted;
      draft_tokens_ += static_cast<uint64_t>(slice.drafts);
      accepted_drafts_ += static_cast<uint64_t>(accepted);
    }
    StepPromptLogprobs* prompt_chunk = nullptr;  // the worker sends one per slice that predicted prompt tokens
    if (next_prompt < prompt.size() && prompt[next_prompt].seq_id == slice.seq_id) prompt_chunk = &prompt[next_prompt++];
    if (seq.finished) {  // its final update went out earlier: this slice was planned ahead of its end
      retire(seq);          // freed once no step in flight carries it
      continue;
    }
    if (!forks.empty() && !seq.cancelled) fork(seq, forks);
    SequenceUpdate& update = updates_.add(seq.req.id, seq.prompt_len, seq.req.owner);
    if (prompt_chunk) {
      seq.prompt_logprobs_reported = prompt_chunk->first_pos + static_cast<uint32_t>(prompt_chunk->entries.size());
      update.prompt_logprobs_from = prompt_chunk->first_pos;
      update.prompt_logprobs = std::move(prompt_chunk->entries);
    }
    for (const StepSample& sample : rows) {
      seq.tokens.push_back(sample.token);
      ++seq.generated;
      update.new_tokens.push_back(sample.token);
      if (sample.logprobs) update.logprobs.push_back(*sample.logprobs);
      if (finish_of(seq) != Finish::none) break;  // a stop id or max_tokens among kept drafts: the rest is dropped
    }
    // (After a slice with drafts the next plan has no step in flight: it proposes drafts itself.)
    if (limits_.speculative.enabled() && !rows.empty() && slice.drafts == 0) note_draftable(seq);
    // Blocks whose positions now all hold KV of known tokens become matchable.
    const int written_to = slice.start_pos + slice.num_tokens - (slice.drafts - accepted);
    cache_full_blocks(seq, slice.start_pos, std::min(written_to, static_cast<int>(seq.tokens.size())));
    if (const Finish finish = finish_of(seq); finish != Finish::none) {
      finish_update(seq, update, finish);
      retire(seq);
    } else {
      if (update.new_tokens.empty() && update.prompt_logprobs.empty()) updates_.drop_last();  // nothing to say
      if (!rows.empty() && !seq.cancelled && hands_off(seq)) {
        ACTORD_CHECK(seq.in_flight == 0 && seq.pending == 0);
        remove_from_running(seq);
        seq.leaving = true;
        handed_off_.push_back(seq.req.id);
      }
    }
  }
  ACTORD_CHECK(next_sample == sampled.size());
  return updates_.view();
}

std::span<const SequenceUpdate> BatchScheduler::on_step_failed(const std::string& error) {
  Step& step = pop_oldest();
  updates_.reset();
  auto fail = [&](Sequence& seq) {
    SequenceUpdate& failed = updates_.add(seq.req.id, seq.prompt_len, seq.req.owner);
    finish_update(seq, failed, Finish::error);
    failed.error = error;
    failed.error_code = Errc::worker_failed;
    retire(seq);
  };
  // Host copies this step was to make cannot be trusted: their sequences will recompute instead.
  if (!step.plan.swap_out.empty()) {
    for (uint64_t id : waiting_) {
      Sequence& seq = seqs_.at(id);
      if (seq.host_blocks.empty()) continue;
      const uint32_t first = seq.host_blocks.front();
      const bool lost = std::any_of(step.plan.swap_out.begin(), step.plan.swap_out.end(),
                                    [&](const BlockCopy& c) { return c.dst == first; });
      if (!lost) continue;
      swap_space_.free(seq.host_blocks);
      seq.host_blocks.clear();
      seq.num_computed = 0;
    }
  }
  for (size_t i = 0; i < step.seqs.size(); ++i) {
    Sequence& seq = *step.seqs[i];
    --seq.in_flight;
    if (step.plan.slices[i].sample) --seq.pending;
    if (seq.finished) {
      retire(seq);
      continue;
    }
    fail(seq);
  }
  // Samples whose copy-on-write block this step was to copy: their KV cannot be trusted.
  for (const BlockCopy& copy : step.plan.copies) {
    for (auto& [id, seq] : seqs_) {
      if (seq.finished || std::find(seq.blocks.begin(), seq.blocks.end(), copy.dst) == seq.blocks.end()) continue;
      fail(seq);
      break;
    }
  }
  return updates_.view();
}

void BatchScheduler::fork(Sequence& parent, std::span<const StepSample> samples) {
  const SamplingOptions options = parent.req.sampling;
  const uint32_t n = options.n;
  ACTORD_CHECK(samples.size() + 1 == n);
  // The parent is sample 0 from now on: one seat, no reserved ids.
  parent.req.sampling.n = 1;
  fork_seats_ -= static_cast<int>(n) - 1;
  for (uint64_t i = 1; i < n; ++i) reserved_ids_.erase(parent.req.id + i);
  const size_t prompt_len = parent.prompt_len;
  const size_t full = prompt_len / static_cast<size_t>(limits_.block_size);
  const bool partial = prompt_len % static_cast<size_t>(limits_.block_size) != 0;
  for (uint32_t f = 1; f < n; ++f) {
    const StepSample& sample = samples[f - 1];
    Sequence child;
    child.req = parent.req;
    child.req.id = parent.req.id + f;
    child.req.sampling = options.for_sample(f);
    child.tokens.assign(parent.tokens.begin(), parent.tokens.begin() + static_cast<ptrdiff_t>(prompt_len));
    child.tokens.push_back(sample.token);
    child.prompt_len = parent.prompt_len;
    child.generated = 1;
    child.arrival = parent.arrival;
    child.decodes_here = true;
    SequenceUpdate& update = updates_.add(child.req.id, child.prompt_len, child.req.owner);
    update.new_tokens.push_back(sample.token);
    if (sample.logprobs) update.logprobs.push_back(*sample.logprobs);
    auto [it, inserted] = seqs_.emplace(child.req.id, std::move(child));
    ACTORD_CHECK(inserted);
    Sequence& seq = it->second;
    if (const Finish finish = finish_of(seq); finish != Finish::none) {  // max_tokens 1, or a stop id
      finish_update(seq, update, finish);
      erase(seq);
      continue;
    }
    // The prompt's full blocks are shared; the partial last one is copied before the parent writes into it.
    seq.blocks.assign(parent.blocks.begin(), parent.blocks.begin() + static_cast<ptrdiff_t>(full));
    cache_.share(seq.blocks);
    if (partial && !cache_.allocate(1, seq.blocks)) {
      cache_.release(seq.blocks);  // no block for the copy: recompute its prompt when admitted
      seq.blocks.clear();
      waiting_.push_front(seq.req.id);
      continue;
    }
    if (partial) copies_.push_back(BlockCopy{parent.blocks[full], seq.blocks.back()});
    seq.num_computed = static_cast<int>(prompt_len);
    running_.push_back(&seq);
  }
}

size_t BatchScheduler::num_swapped() const {
  size_t n = 0;
  for (uint64_t id : waiting_) {
    auto it = seqs_.find(id);
    if (it != seqs_.end() && !it->second.host_blocks.empty()) ++n;
  }
  return n;
}

uint64_t BatchScheduler::prefill_backlog() const {
  uint64_t total = 0;
  for (const auto& [id, seq] : seqs_) {
    if (seq.finished || seq.leaving) continue;
    const size_t left = seq.tokens.size() - std::min<size_t>(seq.tokens.size(), static_cast<size_t>(seq.num_computed));
    if (left > 1 || seq.generated == 0) total += left;
  }
  return total;
}

uint64_t BatchScheduler::outstanding_tokens() const {
  uint64_t total = 0;
  for (const auto& [id, seq] : seqs_) {
    if (seq.finished || seq.leaving) continue;
    total += seq.tokens.size() - std::min<size_t>(seq.tokens.size(), static_cast<size_t>(seq.num_computed));
    total += uint64_t(seq.req.max_tokens - std::min(seq.req.max_tokens, seq.generated)) * seq.req.sampling.n;
  }
  return total;
}

}  // namespace actord
