#include "executors/cuda/step_graphs.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "executors/cuda/device_memory.hpp"

namespace actord::cuda {

StepGraphs::StepGraphs(cudaStream_t stream, int device, Compare compare, std::function<void()> before_launch)
    : stream_(stream), device_(device), compare_(std::move(compare)), before_launch_(std::move(before_launch)) {}

StepGraphs::~StepGraphs() {
  cudaStreamSynchronize(stream_);
  for (auto& [signature, exec] : graphs_) cudaGraphExecDestroy(exec);
  if (check_copy_) cudaFree(check_copy_);
}

void StepGraphs::disable(std::string why) {
  on_ = false;
  state_ = std::move(why);
}

void StepGraphs::begin(bool graphable) {
  queuing_ = on_ && graphable;
  graphable_ = graphable;
  signature_.reset();
  queued_.clear();
  chunk_begin_ = 0;
  replayed_ = false;
}

void StepGraphs::run_queued(size_t first, size_t end) {
  for (size_t i = first; i < end; ++i) queued_[i]();
}

// Launches queued_[chunk_begin_ ..) the way the cache says: its graph, a new graph, or one by one.
void StepGraphs::launch_chunk() {
  const size_t first = chunk_begin_, end = queued_.size();
  if (first == end) return;
  chunk_begin_ = end;
  before_launch_();
  const size_t length = end - first;
  signature_.add(&length, sizeof length);
  const uint64_t signature = signature_.value();
  switch (cache_.way(signature, graphable_ && on_)) {
    case exec::ChunkWay::replay:
      ACTORD_CUDA_CHECK(cudaGraphLaunch(graphs_.at(signature), stream_));
      ++replays_;
      replayed_ = true;
      return;
    case exec::ChunkWay::capture:
      if (capture(signature, first, end)) return;
      break;
    case exec::ChunkWay::one_by_one:
      break;
  }
  run_queued(first, end);
  ++eager_;
}

void StepGraphs::flush() { flush(Check{nullptr, 0}); }

void StepGraphs::flush(Check check) {
  if (!queuing_) return;
  launch_chunk();
  queuing_ = false;
  if (replayed_ && on_ && replay_checks_ < kCheckedReplays && check.data && check.count > 0) check_replay(check);
  queued_.clear();
  chunk_begin_ = 0;
}

// Captures queued_[first, end) as a graph for `signature` and launches it; false (nothing launched, graphs off) where
// the launches cannot be captured or the graph cannot be instantiated.
bool StepGraphs::capture(uint64_t signature, size_t first, size_t end) {
  cudaGraph_t graph = nullptr;
  if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
    disable(std::string("off: cannot capture: ") + cudaGetErrorString(cudaGetLastError()));
    return false;
  }
  run_queued(first, end);
  cudaError_t err = cudaStreamEndCapture(stream_, &graph);
  cudaGraphExec_t exec = nullptr;
  if (err == cudaSuccess) err = cudaGraphInstantiate(&exec, graph, 0);
  if (graph) cudaGraphDestroy(graph);
  if (err != cudaSuccess) {
    cudaGetLastError();
    disable(std::string("off: a step's launches could not be made a graph: ") + cudaGetErrorString(err));
    std::fprintf(stderr, "cuda:%d: step graphs %s\n", device_, state_.c_str());
    return false;
  }
  graphs_[signature] = exec;
  if (const std::optional<uint64_t> dropped = cache_.keep(signature)) {  // after the work that may still use it
    ACTORD_CUDA_CHECK(cudaStreamSynchronize(stream_));
    cudaGraphExecDestroy(graphs_.at(*dropped));
    graphs_.erase(*dropped);
  }
  ACTORD_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
  ++captures_;
  if (state_ == "unused") state_ = "checking";
  return true;
}

// The step's result (replays among its chunks) set aside, the step's launches run one by one over it, and the two
// compared.
void StepGraphs::check_replay(const Check& check) {
  if (check_copy_count_ < check.count) {
    if (check_copy_) ACTORD_CUDA_CHECK(cudaFree(check_copy_));
    ACTORD_CUDA_CHECK(cudaMalloc(&check_copy_, check.count * sizeof(float)));
    check_copy_count_ = check.count;
  }
  ACTORD_CUDA_CHECK(cudaMemcpyAsync(check_copy_, check.data, check.count * sizeof(float), cudaMemcpyDeviceToDevice,
                                    stream_));
  run_queued(0, queued_.size());
  float diff[2] = {0, 0};
  compare_(check_copy_, check.data, check.count, diff);
  ++replay_checks_;
  if (!(diff[0] <= kReplayTolerance * std::max(1.0f, diff[1]))) {
    disable("off: a replayed graph differed from its launches run one by one by " + std::to_string(diff[0]) +
            " (largest value " + std::to_string(diff[1]) + ")");
    std::fprintf(stderr, "cuda:%d: step graphs %s\n", device_, state_.c_str());
  } else if (replay_checks_ == kCheckedReplays) {
    state_ = "on";
  }
}

}  // namespace actord::cuda
