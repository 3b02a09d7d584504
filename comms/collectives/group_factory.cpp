#include "comms/collectives/group_factory.hpp"

#include "comms/collectives/in_process_communicator.hpp"
#include "comms/collectives/shm_communicator.hpp"
#include "comms/collectives/zmq_communicator.hpp"

namespace actord::coll {

Result<std::vector<std::unique_ptr<Communicator>>> create_local_group(const GroupSpec& spec) {
  ACTORD_TRY_STATUS(validate(spec));
  const Backend backend = resolve_backend(spec);
  if (backend != Backend::in_process) {
    return make_error(Errc::invalid_argument, describe(spec) + ": backend " + backend_name(backend) +
                                                  " connects ranks in their own processes: call join_group in each");
  }
  return create_in_process_group(spec);
}

Result<std::unique_ptr<Communicator>> join_group(const GroupSpec& spec, int rank) {
  ACTORD_TRY_STATUS(validate(spec));
  switch (resolve_backend(spec)) {
    case Backend::shared_memory: return join_shm_group(spec, rank);
    case Backend::zmq: return join_zmq_group(spec, rank);
    case Backend::nccl:
      return make_error(Errc::invalid_argument, describe(spec) + ": an NCCL group is joined on a CUDA rank's device "
                                                                  "over a CPU group (comms/nccl/join_nccl_group)");
    case Backend::in_process:
    case Backend::automatic: break;
  }
  return make_error(Errc::invalid_argument,
                    describe(spec) + ": the in_process backend makes all ranks at once: call create_local_group");
}

}  // namespace actord::coll
