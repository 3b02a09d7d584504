// An out-of-tree scheduling policy, built like a plugin author would build one: against actord's headers only.
// `shortest_prompt_first` admits the waiting requests with the fewest tokens first (ties: arrival order), which
// cuts the mean time to first token when prompt lengths vary widely; it never preempts for an admission, and when
// blocks run out the running sequence with the most tokens makes room.
//
// Use: list the library in a topology and name the policy:
//   plugins: [path/to/libshortest_prompt_first.so]
//   scheduler: {policy: shortest_prompt_first}
#include <algorithm>

#include "plugins/plugin_api.hpp"

namespace {

class ShortestPromptFirst final : public actord::SchedulingPolicy {
 public:
  void decide(const actord::PolicySnapshot& s, actord::PolicyDecision& d) override {
    order_.assign(s.waiting.begin(), s.waiting.end());
    std::stable_sort(order_.begin(), order_.end(), [](const auto& a, const auto& b) {
      return a.num_tokens != b.num_tokens ? a.num_tokens < b.num_tokens : a.arrival < b.arrival;
    });
    const size_t room = s.max_num_seqs > static_cast<int>(s.running.size())
                            ? static_cast<size_t>(s.max_num_seqs) - s.running.size() : 0;
    for (size_t i = 0; i < order_.size() && i < room; ++i) d.admit.push_back(order_[i].id);
  }
  size_t victim(std::span<const actord::PolicySequence> candidates) override {
    size_t longest = 0;
    for (size_t i = 1; i < candidates.size(); ++i)
      if (candidates[i].num_tokens >= candidates[longest].num_tokens) longest = i;
    return longest;
  }

 private:
  std::vector<actord::PolicySequence> order_;
};

int register_policies(actord::PolicyRegistry& registry) {
  registry.add("shortest_prompt_first", [] { return std::make_unique<ShortestPromptFirst>(); });
  return 0;
}

}  // namespace

ACTORD_POLICY_PLUGIN(register_policies)
