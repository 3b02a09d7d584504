// The NCCL backend of the collectives interface, for ranks whose executor backend is CUDA: device memory goes
// through NCCL on the rank's CUDA stream (so it is ordered with the backend's kernels), host memory (the tokens
// ranks exchange between steps) through the CPU group the NCCL group was bootstrapped from.
//
// Contract: as Communicator's, with two departures: sums are NCCL's (every rank gets the same values, but not the
// rank-order float sum of the CPU backends), and a call returns once its work on the stream is done (the wait is
// bounded by spec().timeout: past it, or when NCCL reports a peer's failure, the NCCL communicator is aborted and
// the group broken). Which memory a span is in is asked of CUDA (cudaPointerGetAttributes); every rank of a group
// passes the same kind for the same call. Groups are rebuilt, not resized: a resize joins a new group (new id) and
// a new NCCL communicator with it.
//
// join_nccl_group() takes the rank's CPU communicator of the same group (its spec names the group and the
// timeout), runs ncclGetUniqueId on rank 0 and hands the id to every rank through it, and initialises NCCL on
// `device` (the rank's GPU) with `stream` (its backend's cudaStream_t). Without CUDA in the build it is an Error.
#pragma once

#include <memory>

#include "comms/collectives/communicator.hpp"
#include "core/status.hpp"

namespace actord::coll {

Result<std::unique_ptr<Communicator>> join_nccl_group(std::unique_ptr<Communicator> bootstrap, int device,
                                                      void* stream);

}  // namespace actord::coll
