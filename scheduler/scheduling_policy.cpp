#include "scheduler/scheduling_policy.hpp"

#include <algorithm>

namespace actord {
namespace {

class FcfsPolicy final : public SchedulingPolicy {
 public:
  void decide(const PolicySnapshot& s, PolicyDecision& d) override {
    const size_t room = s.max_num_seqs > static_cast<int>(s.running.size())
                            ? static_cast<size_t>(s.max_num_seqs) - s.running.size() : 0;
    for (size_t i = 0; i < s.waiting.size() && i < room; ++i) d.admit.push_back(s.waiting[i].id);
  }
  size_t victim(std::span<const PolicySequence> candidates) override { return candidates.size() - 1; }
};

// a runs before b.
bool runs_before(const PolicySequence& a, const PolicySequence& b) {
  return a.priority != b.priority ? a.priority < b.priority : a.arrival < b.arrival;
}

class PriorityPolicy final : public SchedulingPolicy {
 public:
  void decide(const PolicySnapshot& s, PolicyDecision& d) override {
    order_.assign(s.waiting.begin(), s.waiting.end());
    std::sort(order_.begin(), order_.end(), runs_before);
    const size_t room = s.max_num_seqs > static_cast<int>(s.running.size())
                            ? static_cast<size_t>(s.max_num_seqs) - s.running.size() : 0;
    const PolicySequence& best = order_.front();
    // Make room for the best waiting request at the expense of running ones it outranks.
    size_t free = s.free_blocks;
    bool seat = room > 0;
    if (free < best.blocks_needed || !seat) {
      victims_.assign(s.running.begin(), s.running.end());
      std::sort(victims_.begin(), victims_.end(), [](const auto& a, const auto& b) { return runs_before(b, a); });
      for (const PolicySequence& v : victims_) {
        if (free >= best.blocks_needed && seat) break;
        if (!runs_before(best, v) || v.priority <= best.priority) break;
        d.preempt.push_back(v.id);
        free += v.blocks_held;
        seat = true;
      }
      if (free < best.blocks_needed || !seat) d.preempt.clear();  // it would not fit anyway: preempt nobody
    }
    const size_t seats = room + d.preempt.size();
    for (size_t i = 0; i < order_.size() && i < seats; ++i) d.admit.push_back(order_[i].id);
  }
  size_t victim(std::span<const PolicySequence> candidates) override {
    size_t worst = 0;
    for (size_t i = 1; i < candidates.size(); ++i)
      if (!runs_before(candidates[i], candidates[worst])) worst = i;
    return worst;
  }

 private:
  std::vector<PolicySequence> order_, victims_;  // scratch
};

}  // namespace

std::unique_ptr<SchedulingPolicy> make_fcfs_policy() { return std::make_unique<FcfsPolicy>(); }
std::unique_ptr<SchedulingPolicy> make_priority_policy() { return std::make_unique<PriorityPolicy>(); }

}  // namespace actord
