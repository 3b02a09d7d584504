// A build without the CUDA toolkit: no NCCL groups, and a clear error for whoever asks for one.
#include "comms/nccl/nccl_communicator.hpp"

namespace actord::coll {

Result<std::unique_ptr<Communicator>> join_nccl_group(std::unique_ptr<Communicator>, int, void*) {
  return make_error(Errc::unsupported, "NCCL collectives: actord was built without CUDA (no nvcc at configure time)");
}

}  // namespace actord::coll
