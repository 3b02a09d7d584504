// The in-process backend: the ranks are threads of one process and read each other's buffers directly.
//
// Contract: create() makes the communicators of all ranks of a thread-placement group at once (they share one
// hub); hand each to its rank's thread. No data is staged: all_reduce reads every rank's buffer and writes the sum
// of its share into all of them; all_gather, reduce_scatter and all_to_all copy straight from the peers' buffers;
// send/recv hand over a pointer and the receiver copies (send waits for the matching recv). Everything else is the
// Communicator contract.
#pragma once

#include <memory>
#include <vector>

#include "comms/collectives/communicator.hpp"

namespace actord::coll {

Result<std::vector<std::unique_ptr<Communicator>>> create_in_process_group(const GroupSpec& spec);

}  // namespace actord::coll
