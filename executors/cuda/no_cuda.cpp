// A build without the CUDA toolkit: no device, and a clear error for whoever asks for one.
#include "executors/cuda/cuda_backend.hpp"

namespace actord::cuda {

bool built_with_cuda() { return false; }
std::vector<std::string> path_names() { return {}; }
int device_count() { return 0; }
std::string unavailable_reason() { return "actord was built without CUDA (no nvcc at configure time)"; }
std::vector<std::string> device_names() { return {}; }
int device_of(const exec::Backend&) { return -1; }
void* stream_of(const exec::Backend&) { return nullptr; }
std::string long_prefill_state(const exec::Backend&) { return "unused"; }
std::string split_decode_state(const exec::Backend&) { return "unused"; }
std::string flash_prefill_state(const exec::Backend&) { return "unused"; }
std::string device_sampling_state(const exec::Backend&) { return "unused"; }
StepGraphStats step_graph_stats(const exec::Backend&) { return {}; }
void without_step_graphs(exec::Backend&, const std::string&) {}
Result<std::unique_ptr<exec::Backend>> make_backend(int, cpu::ThreadPool*) {
  return make_error(Errc::unsupported, "device: cuda: " + unavailable_reason());
}

}  // namespace actord::cuda
