#include "executors/cuda/step_graphs.hpp"

#include <algorithm>
#include <cstdio>

#include "executors/cuda/device_memory.hpp"

namespace actord::cuda {

namespace {
constexpr uint64_t kSeed = 0xcbf29ce484222325ull;
constexpr uint64_t kPrime = 0x100000001b3ull;
}  // namespace

StepGraphs::StepGraphs(cudaStream_t stream, int device, Compare compare, std::function<void()> before_launch)
    : stream_(stream), device_(device), compare_(std::move(compare)), before_launch_(std::move(before_launch)) {}

StepGraphs::~StepGraphs() {
  cudaStreamSynchronize(stream_);
  for (auto& [signature, graph] : graphs_) cudaGraphExecDestroy(graph.exec);
  if (check_copy_) cudaFree(check_copy_);
}

void StepGraphs::disable(std::string why) {
  on_ = false;
  state_ = std::move(why);
}

void StepGraphs::begin(bool graphable) {
  flush();
  queuing_ = on_ && graphable;
  graphable_ = graphable;
  signature_ = kSeed;
  queued_.clear();
  chunk_begin_ = 0;
  replayed_ = false;
}

void StepGraphs::mix(const void* p, size_t n) {
  const auto* bytes = static_cast<const unsigned char*>(p);
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, bytes, 8);
    signature_ = (signature_ ^ word) * kPrime;
    bytes += 8;
    n -= 8;
  }
  uint64_t tail = n;
  for (size_t i = 0; i < n; ++i) tail = (tail << 8) | bytes[i];
  signature_ = (signature_ ^ tail) * kPrime;
}

void StepGraphs::run_queued(size_t first, size_t end) {
  for (size_t i = first; i < end; ++i) queued_[i]();
}

// Launches queued_[chunk_begin_ ..): its graph, else a new one where its signature was seen before, else one by one.
void StepGraphs::launch_chunk() {
  const size_t first = chunk_begin_, end = queued_.size();
  if (first == end) return;
  chunk_begin_ = end;
  before_launch_();
  const uint64_t signature = signature_ ^ (uint64_t(end - first) << 48);  // the chunk's length too
  auto it = graphable_ && on_ ? graphs_.find(signature) : graphs_.end();
  if (it != graphs_.end()) {
    it->second.last_use = ++uses_;
    ACTORD_CUDA_CHECK(cudaGraphLaunch(it->second.exec, stream_));
    ++replays_;
    replayed_ = true;
    return;
  }
  if (graphable_ && on_ && seen_.count(signature) && capture(signature, first, end)) return;
  run_queued(first, end);
  ++eager_;
  if (graphable_ && on_) {
    if (seen_.size() >= kMaxSeen) seen_.clear();
    seen_.insert(signature);
  }
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
  if (graphs_.size() >= kMaxGraphs) {  // the least recently used goes (after the work that may still use it)
    auto oldest = std::min_element(graphs_.begin(), graphs_.end(),
                                   [](const auto& a, const auto& b) { return a.second.last_use < b.second.last_use; });
    ACTORD_CUDA_CHECK(cudaStreamSynchronize(stream_));
    cudaGraphExecDestroy(oldest->second.exec);
    graphs_.erase(oldest);
  }
  graphs_[signature] = Graph{exec, ++uses_};
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
