#include "executors/cuda/deferred_picks.hpp"

#include <algorithm>
#include <cstring>

#include "core/status.hpp"
#include "executors/cuda/device_memory.hpp"

namespace actord::cuda {

DeferredPicks::DeferredPicks(cudaStream_t stream) : stream_(stream) {
  for (Slot& s : slots_) ACTORD_CUDA_CHECK(cudaEventCreateWithFlags(&s.event, cudaEventDisableTiming));
}

DeferredPicks::~DeferredPicks() {
  cudaStreamSynchronize(stream_);
  for (Slot& s : slots_) {
    for (RowBest* old : s.retired) cudaFreeHost(old);
    if (s.pinned) cudaFreeHost(s.pinned);
    cudaEventDestroy(s.event);
  }
}

uint64_t DeferredPicks::begin() {
  const uint64_t ticket = ++ticket_;
  Slot& s = slot_of(ticket);
  // Its last user, two steps back, was completed before the step between began (at most two outstanding).
  ACTORD_CHECK(s.completed);
  s.ticket = ticket;
  s.completed = false;
  s.count = 0;
  s.pinned_used = 0;
  s.copies.clear();
  return ticket;
}

bool DeferredPicks::active() const { return ticket_ > 0 && !slot_of(ticket_).completed; }

RowBest* DeferredPicks::next_rows(int rows) {
  ACTORD_CHECK(active() && rows > 0);
  Slot& s = slot_of(ticket_);
  const size_t need = size_t(s.count) + size_t(rows);
  if (need > s.rows_capacity) {  // grown keeping the rows of the step's earlier pieces
    const size_t capacity = std::max(need, s.rows_capacity * 2);
    std::shared_ptr<void> grown = device_memory(capacity * sizeof(RowBest));
    if (s.count > 0)
      ACTORD_CUDA_CHECK(cudaMemcpyAsync(grown.get(), s.rows.get(), size_t(s.count) * sizeof(RowBest),
                                        cudaMemcpyDeviceToDevice, stream_));
    s.rows = std::move(grown);  // the old block's cudaFree waits for the work that reads it
    s.rows_capacity = capacity;
  }
  RowBest* at = static_cast<RowBest*>(s.rows.get()) + s.count;
  s.count += rows;
  s.last_rows = rows;
  return at;
}

void DeferredPicks::queue_copy(std::span<RowBest> out) { queue(Slot::Copy{out, {}, nullptr}, out.size()); }

void DeferredPicks::queue_copy(std::span<SampledToken> out) { queue(Slot::Copy{{}, out, nullptr}, out.size()); }

void DeferredPicks::queue(Slot::Copy copy, size_t room) {
  Slot& s = slot_of(ticket_);
  ACTORD_CHECK(active() && room >= size_t(s.last_rows));
  const size_t rows = size_t(s.last_rows);
  if (s.pinned_used + rows > s.pinned_capacity) {
    // A larger step than any before: new staging; the old one, which copies may still land in, goes at complete().
    if (s.pinned) s.retired.push_back(s.pinned);
    s.pinned_capacity = std::max({rows, s.pinned_capacity * 2, kMinPinnedRows});
    void* p = nullptr;
    ACTORD_CUDA_CHECK(cudaMallocHost(&p, s.pinned_capacity * sizeof(RowBest)));
    s.pinned = static_cast<RowBest*>(p);
    s.pinned_used = 0;
  }
  RowBest* staged = s.pinned + s.pinned_used;
  const RowBest* src = static_cast<const RowBest*>(s.rows.get()) + (s.count - s.last_rows);
  ACTORD_CUDA_CHECK(cudaMemcpyAsync(staged, src, rows * sizeof(RowBest), cudaMemcpyDeviceToHost, stream_));
  ACTORD_CUDA_CHECK(cudaEventRecord(s.event, stream_));
  if (!copy.out.empty()) copy.out = copy.out.first(rows);
  if (!copy.tokens.empty()) copy.tokens = copy.tokens.first(rows);
  copy.staged = staged;
  s.copies.push_back(copy);
  s.pinned_used += rows;
}

const RowBest* DeferredPicks::previous() const {
  if (ticket_ < 2) return nullptr;
  const Slot& s = slot_of(ticket_ - 1);
  return s.ticket == ticket_ - 1 ? static_cast<const RowBest*>(s.rows.get()) : nullptr;
}

int DeferredPicks::previous_rows() const {
  if (ticket_ < 2) return 0;
  const Slot& s = slot_of(ticket_ - 1);
  return s.ticket == ticket_ - 1 ? s.count : 0;
}

bool DeferredPicks::done(uint64_t ticket) const {
  const Slot& s = slot_of(ticket);
  if (s.ticket != ticket || s.completed || s.copies.empty()) return true;
  return cudaEventQuery(s.event) == cudaSuccess;
}

void DeferredPicks::complete(uint64_t ticket) {
  Slot& s = slot_of(ticket);
  if (s.ticket != ticket || s.completed) return;
  if (!s.copies.empty()) ACTORD_CUDA_CHECK(cudaEventSynchronize(s.event));
  deliver(s);
  s.completed = true;
}

void DeferredPicks::deliver(Slot& s) {
  for (const Slot::Copy& c : s.copies) {
    if (!c.out.empty()) std::memcpy(c.out.data(), c.staged, c.out.size_bytes());
    for (size_t i = 0; i < c.tokens.size(); ++i) c.tokens[i] = SampledToken{c.staged[i].id, 0.0f, {}};
  }
  s.copies.clear();
  for (RowBest* old : s.retired) ACTORD_CUDA_CHECK(cudaFreeHost(old));
  s.retired.clear();
}

}  // namespace actord::cuda
