// BatchScheduler (batch_scheduler.hpp): sequences leaving it. Hand-backs of a lost, draining, replaced or
// rebalanced replica (take_all, take_waiting, take_unstarted, as continuations; movable_kv: those whose KV can go
// along) and a prefill replica's hand-offs to decode replicas (take_handed_off, release_handed_off).
#include <algorithm>

#include "scheduler/batch_scheduler.hpp"

namespace actord {

std::vector<std::pair<uint64_t, int>> BatchScheduler::movable_kv() const {
  std::vector<std::pair<uint64_t, int>> out;
  for (const auto& [id, seq] : seqs_) {
    if (seq.finished || seq.cancelled || seq.leaving || !seq.sent || seq.generated == 0 || !seq.host_blocks.empty() ||
        seq.req.sampling.n > 1)
      continue;
    out.emplace_back(id, static_cast<int>(seq.tokens.size()) - 1);
  }
  return out;
}

SequenceRequest BatchScheduler::continuation_of(const Sequence& seq) const {
  SequenceRequest r = seq.req;
  r.resumed.assign(seq.tokens.begin() + seq.prompt_len, seq.tokens.begin() + seq.prompt_len + seq.generated);
  r.prompt_logprobs_reported = seq.prompt_logprobs_reported;
  return r;
}

HandBack BatchScheduler::take_all() {
  HandBack out;
  std::vector<const Sequence*> live;
  for (const auto& [id, seq] : seqs_)
    if (!seq.finished && !seq.leaving) live.push_back(&seq);
  std::sort(live.begin(), live.end(), [](const Sequence* a, const Sequence* b) {
    return a->arrival != b->arrival ? a->arrival < b->arrival : a->req.id < b->req.id;
  });
  for (const Sequence* seq : live) {
    if (!seq->cancelled) {
      out.requests.push_back(continuation_of(*seq));
      continue;
    }
    SequenceUpdate& u = out.cancelled.emplace_back();
    u.id = seq->req.id;
    u.prompt_tokens = seq->prompt_len;
    u.owner = seq->req.owner;
    u.finish = Finish::cancelled;
    if (seq->req.sampling.n > 1) u.unforked_samples = seq->req.sampling.n - 1;
  }
  // Every block back to the lease (shared ones once per holder), every step forgotten.
  for (auto& [id, seq] : seqs_) {
    if (!seq.blocks.empty()) cache_.release(seq.blocks);
    if (!seq.host_blocks.empty()) swap_space_.free(seq.host_blocks);
  }
  seqs_.clear();
  waiting_.clear();
  running_.clear();
  for (Step& step : steps_) {
    step.plan = StepPlan{};
    step.seqs.clear();
  }
  head_ = in_flight_ = 0;
  needs_sync_ = false;
  shortfall_ = 0;
  released_.clear();
  swap_out_.clear();
  copies_.clear();
  fork_seats_ = 0;
  reserved_ids_.clear();
  handed_off_.clear();
  return out;
}

std::vector<HandOff> BatchScheduler::take_handed_off() {
  std::vector<HandOff> out;
  out.reserve(handed_off_.size());
  for (uint64_t id : handed_off_) {
    auto it = seqs_.find(id);
    if (it == seqs_.end() || !it->second.leaving) continue;
    out.push_back(HandOff{continuation_of(it->second), static_cast<int>(it->second.tokens.size()) - 1});
  }
  handed_off_.clear();
  return out;
}

void BatchScheduler::release_handed_off(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || !it->second.leaving) return;
  release(it->second);
  erase(it->second);
}

template <class Leaves>
HandBack BatchScheduler::take_waiting_if(Leaves leaves) {
  HandBack out;
  const std::vector<uint64_t> waiting(waiting_.begin(), waiting_.end());
  for (uint64_t id : waiting) {
    Sequence& seq = seqs_.at(id);
    if (seq.in_flight > 0 || seq.finished || !leaves(seq)) continue;
    out.requests.push_back(continuation_of(seq));
    for (uint64_t i = 1; i < seq.req.sampling.n; ++i) reserved_ids_.erase(id + i);
    release(seq);
    erase(seq);
  }
  return out;
}

HandBack BatchScheduler::take_waiting() {
  return take_waiting_if([](const Sequence&) { return true; });
}

HandBack BatchScheduler::take_unstarted() {
  return take_waiting_if([](const Sequence& seq) { return seq.blocks.empty() && seq.host_blocks.empty(); });
}

size_t BatchScheduler::num_handing_off() const {
  return static_cast<size_t>(std::count_if(seqs_.begin(), seqs_.end(), [](const auto& kv) { return kv.second.leaving; }));
}

}  // namespace actord
