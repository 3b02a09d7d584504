// The CUDA executor backend: weights and activations in one GPU's memory, GEMMs by this folder's small-batch kernel
// (up to 8 rows) or cuBLAS (bf16/f16 weights with the activations rounded to the weights' type, f32 accumulation;
// f32 weights in plain f32), attention split among kernels by executors/attention_plan.hpp, and this folder's
// kernels for everything else (cuda_kernels.cuh). Primitives are queued on one stream; download() waits for them.
// ACTORD_CUDA_DISABLE and ACTORD_CUDA_PROFILE (environment) are described in executors/README.md.
//
// Contract: as exec::Backend's. This header needs no CUDA headers: a build without CUDA (ACTORD_WITH_CUDA off)
// links no_cuda.cpp, whose make_backend() says so. device_count() is 0 when there is no driver or no device, and
// never throws; make_backend() of a device that is not there is an Error naming why.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "executors/backend.hpp"

namespace actord::cpu {
class ThreadPool;
}

namespace actord::cuda {

// Whether this build has the CUDA backend at all.
bool built_with_cuda();
// The paths ACTORD_CUDA_DISABLE names (each sends its work to a slower fallback).
std::vector<std::string> path_names();
// CUDA devices this process can use; 0 without a driver or a device (why: unavailable_reason()).
int device_count();
std::string unavailable_reason();
// "NAME (N GiB, sm_XY)" of each device this process can use.
std::vector<std::string> device_names();
// A backend on device `device` (its own stream and cuBLAS handle); its host work (rows the GPU leaves to the host
// sampler) runs on `pool` (the caller's, outliving the backend), or on a thread of its own where pool is null.
Result<std::unique_ptr<exec::Backend>> make_backend(int device, cpu::ThreadPool* pool = nullptr);
// The device and the cudaStream_t (as void*) of a backend make_backend() made; -1 and null for any other.
int device_of(const exec::Backend& backend);
void* stream_of(const exec::Backend& backend);
// The tensor-core attention of long prefills (long_prefill_attention.cuh) in a backend make_backend() made: "unused"
// before its first use, "on" once that use matched the FMA tiles, else "off: ..." saying by how much it differed.
std::string long_prefill_state(const exec::Backend& backend);
// The same for split-K decode attention (decode_attention.cu), checked against one warp per query, and for the
// one-kernel tensor-core attention of long prefills (flash_prefill_attention.cu), checked against the FMA tiles.
std::string split_decode_state(const exec::Backend& backend);
std::string flash_prefill_state(const exec::Backend& backend);
// Sampling on the GPU (Backend::sample_rows, device_sampler.cu): "unused", "checking" while its first calls are
// compared row by row with the host sampler, "on" once they agreed, else "off: ..." naming the first row that differed.
std::string device_sampling_state(const exec::Backend& backend);
// Decode steps as CUDA graphs (step_graphs.hpp): state ("unused", "checking" until the first steps with replays
// matched their launches run one by one, "on", or "off: ..."), and the chunks of steps replayed, captured, or run
// launch by launch.
struct StepGraphStats {
  std::string state = "unused";
  long replays = 0, captures = 0, eager = 0;
};
StepGraphStats step_graph_stats(const exec::Backend& backend);
// Turns step graphs off for this backend (its steps run collectives between primitives, which graphs do not order).
void without_step_graphs(exec::Backend& backend, const std::string& why);

}  // namespace actord::cuda
