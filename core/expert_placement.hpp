// Where the experts of an MoE layer live under expert parallelism with redundant slots (EPLB): `ep` ranks of
// `slots_per_rank` slots each, slot s on rank s / slots_per_rank holding logical expert placement[s]. Every expert
// has at least one slot; hot ones get more, and a token routed to an expert goes to one of its copies on the token's
// own rank when there are some (token mod their number), else to one of all its copies (token mod copies).
//
// Contract: pure functions. rebalance() gives each expert copies in proportion to its load (the busiest per copy
// gets the next extra slot), then places the copies, heaviest first, on the least loaded rank with a free slot that
// does not hold that expert yet (any rank with a free slot when none is left); within a rank the slots are in
// expert order. Deterministic: equal loads resolve to the lower expert and the lower rank.
#pragma once

#include <cstdint>
#include <vector>

namespace actord {

struct ExpertPlacement {
  int ep = 1;
  int slots_per_rank = 0;
  std::vector<int32_t> slot_expert;  // [ep * slots_per_rank]

  // num_experts / ep own experts per rank (rank r: [r E / ep, (r + 1) E / ep)), then `redundant` copies of the next
  // rank's first experts: what a group starts with.
  static ExpertPlacement initial(int num_experts, int ep, int redundant);
  int rank_of_slot(int slot) const { return slot / slots_per_rank; }
  // The slot that serves token t's row for expert e when rank `owner` holds the token.
  int slot_for(int32_t token, int expert, int owner) const;
  bool operator==(const ExpertPlacement&) const = default;
};

// A placement of the same shape as `now` balancing `load` (tokens per logical expert).
ExpertPlacement rebalance(const std::vector<uint64_t>& load, const ExpertPlacement& now);

// The busiest rank's share over the mean when `load` is split evenly among each expert's copies (1.0: even; 0 when
// there is no load).
double rank_imbalance(const std::vector<uint64_t>& load, const ExpertPlacement& placement);

}  // namespace actord
