// Decode steps as CUDA graphs: the launches of a step, from begin_step to the first read of a result on the host,
// queued instead of run and launched as graphs of kChunk launches each (a chunk is launched as soon as it is
// complete, so the GPU runs one while the host queues the next), so the GPU runs a step's few hundred kernels back
// to back instead of one launch at a time.
//
// Contract (the CUDA backend is the only user):
// - begin(graphable) opens a step's segment (after flush(): nothing may be queued); while it is open and queuing(), run(launch) queues `launch` (a closure
//   that launches kernels on the stream and reads nothing on the host) and note(...) adds the values its launches
//   depend on to the signature: every argument, pointer and size the launch passes to a kernel. A chunk's signature
//   is the hash of every note since begin (the step's own first), so two chunks of the same signature launch the
//   same kernels with the same arguments. While not queuing, run(launch) runs it at once.
// - A chunk whose signature has a graph replays it; one seen in an earlier step is captured, instantiated and
//   launched; any other runs launch by launch (executors/graph_cache.hpp decides, and which graph goes when more
//   than kMaxGraphs are kept).
// - flush(check) launches what is queued and ends the segment, before any host read or host write of device memory,
//   any allocation and any operation outside the graphs' reach (collectives, a check that reads a result on the
//   host). spoil() keeps the open segment's remaining chunks out of graphs.
// - The first steps with a replay (kCheckedReplays) are checked: `check` (the buffer the host is about to read)
//   after the graphs against the step's launches run one by one, which the segment may repeat (it starts at
//   begin_step, so it rewrites everything it reads: KV writes repeat the same values). Any difference turns graphs
//   off, with a message, and the launch-by-launch result stands.
// - The backend's stream must not be capturing outside flush(); graphs are off while kernels are profiled.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "executors/graph_cache.hpp"

namespace actord::cuda {

class StepGraphs {
 public:
  // Device memory the host is about to read after a flush: rows x width floats (for the replay check).
  struct Check {
    const float* data = nullptr;
    size_t count = 0;
  };
  // check_launch(a, b, count, diff): diff[0] = max |a - b|, diff[1] = max |b| over count floats, on the stream.
  using Compare = std::function<void(const float*, const float*, size_t, float*)>;

  // before_launch: called before each chunk is launched (the backend copies the chunk's host inputs then).
  StepGraphs(cudaStream_t stream, int device, Compare compare, std::function<void()> before_launch);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  bool on() const { return on_; }
  const std::string& state() const { return state_; }
  void disable(std::string why);

  void begin(bool graphable);
  bool queuing() const { return queuing_; }
  void spoil() { graphable_ = false; }

  template <class F>
  void run(F&& launch) {
    if (!queuing_) {
      launch();
      return;
    }
    queued_.emplace_back(std::forward<F>(launch));
    if (queued_.size() - chunk_begin_ >= kChunk) launch_chunk();
  }
  // Adds trivially copyable values (pointers, sizes; no struct with padding bytes, whose contents vary) to the open
  // segment's signature.
  template <class... T>
  void note(const T&... values) {
    if (!queuing_) return;
    (signature_.add(&values, sizeof(T)), ...);
    static_assert((std::is_trivially_copyable_v<T> && ...));
  }

  void flush(Check check);
  void flush();  // with nothing to check

  // What the chunks did so far: replays, captures, and chunks run launch by launch.
  long replays() const { return replays_; }
  long captures() const { return captures_; }
  long eager_chunks() const { return eager_; }

 private:
  static constexpr size_t kChunk = 32;       // launches a graph holds (a few layers of a decode step)
  static constexpr size_t kMaxGraphs = 512;  // the least recently replayed goes beyond this
  static constexpr size_t kMaxSeen = 4096;   // signatures remembered from chunks run launch by launch
  static constexpr int kCheckedReplays = 3;
  static constexpr float kReplayTolerance = 1e-5f;

  void run_queued(size_t first, size_t end);
  void launch_chunk();
  bool capture(uint64_t signature, size_t first, size_t end);
  void check_replay(const Check& check);

  cudaStream_t stream_;
  int device_;
  Compare compare_;
  std::function<void()> before_launch_;
  bool on_ = true;
  std::string state_ = "unused";
  bool queuing_ = false, graphable_ = false;
  exec::Signature signature_;
  std::vector<std::function<void()>> queued_;  // the segment's launches (kept for its check)
  size_t chunk_begin_ = 0;                      // the first of queued_ not launched yet
  bool replayed_ = false;                       // a chunk of this segment replayed a graph
  exec::GraphCache cache_{kMaxGraphs, kMaxSeen};
  std::unordered_map<uint64_t, cudaGraphExec_t> graphs_;  // the graphs cache_ keeps
  long replays_ = 0, captures_ = 0, eager_ = 0;
  int replay_checks_ = 0;
  float* check_copy_ = nullptr;  // the replay's result while the check reruns the launches
  size_t check_copy_count_ = 0;
};

}  // namespace actord::cuda
