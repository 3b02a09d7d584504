// A worker rank's links to the other ranks of its tensor x pipeline parallel replica: the communicators of its
// stage's TP group and of its tp rank's pipeline group (group_codec.hpp: how their GroupSpecs travel in WorkerInit).
//
// Contract: ranks that are threads of the engine get communicators the coordinator made (create_local_group); ranks
// in their own processes get the GroupSpec in WorkerInit and join the group (join_group, bounded by its timeout).
// CAF-free.
#pragma once

#include <memory>
#include <vector>

#include "comms/collectives/communicator.hpp"

namespace actord {

// The rank that samples and answers each step for its replica: tp rank 0 of the last pipeline stage, where the
// logits are. The coordinator hands the scheduler this rank as the one to wait for; WorkerCore samples only there.
constexpr bool is_driver(int tp_rank, int pp_rank, int pp) { return tp_rank == 0 && pp_rank == pp - 1; }

struct RankLinks {
  std::unique_ptr<coll::Communicator> tp;        // null when tp is 1
  std::unique_ptr<coll::Communicator> pipeline;  // null when pp is 1
  // Every EP rank of the replica (attention lanes, then AFD's FFN ranks); null without lanes or AFD.
  std::unique_ptr<coll::Communicator> ep;
  // Two-batch overlap: the groups of micro-batches 1 .. m - 1 (micro-batch 0 uses the ones above); empty without.
  struct MicroBatch {
    std::unique_ptr<coll::Communicator> tp, pipeline, ep;
  };
  std::vector<MicroBatch> micro;

  // fn(communicator, micro-batch) for each group the rank is in: micro-batch 0's (tp, pipeline, ep), then each
  // later micro-batch's.
  template <class Fn>
  void for_each(Fn&& fn) const {
    for (const auto* c : {&tp, &pipeline, &ep})
      if (*c) fn(**c, 0);
    for (size_t k = 0; k < micro.size(); ++k)
      for (const auto* c : {&micro[k].tp, &micro[k].pipeline, &micro[k].ep})
        if (*c) fn(**c, static_cast<int>(k + 1));
  }
};

}  // namespace actord
