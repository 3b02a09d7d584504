// The CPU implementation of the executor backend (executors/backend.hpp): host memory, the blocked bf16/f16/f32
// GEMM, paged attention and the f32 kernels of this folder, multi-threaded through a ThreadPool, with the kernels
// of one instruction set.
//
// Contract: as Backend's. The pool is the caller's and outlives the backend; isa is resolved (never automatic:
// isa_for() first). Every primitive has run when it returns. Matrices uploaded for gemm are rearranged into the
// blocked layout (blocked_weights.hpp) in huge-page memory the Weight owns; a lookup-only matrix is read in place
// (keeps_host_view(lookup)).
#pragma once

#include <vector>

#include "executors/backend.hpp"
#include "executors/cpu/gemm.hpp"

namespace actord::cpu {

class ThreadPool;

class CpuBackend final : public exec::Backend {
 public:
  CpuBackend(ThreadPool& pool, Isa isa);

  exec::DeviceKind kind() const override { return exec::DeviceKind::cpu; }
  std::string describe() const override;
  ThreadPool& pool() const { return pool_; }
  Isa isa() const { return isa_; }

  void download(const exec::Buffer& b, size_t offset, std::span<float> host) override;
  void copy_bytes(void* dst, const void* src, size_t n) override;

  Result<exec::Weight> upload_matrix(const exec::HostMatrix& m, exec::WeightUse use) override;
  Result<exec::Weight> upload_glu(const exec::HostMatrix& gate, const exec::HostMatrix& up) override;
  Result<exec::Weight> upload_quantized(const QuantizedMatrix& m) override;
  Result<exec::Weight> upload_quantized_glu(const QuantizedMatrix& gate, const QuantizedMatrix& up) override;
  bool keeps_host_view(exec::WeightUse use) const override { return use == exec::WeightUse::lookup; }
  std::span<const std::byte> weight_bytes(const exec::Weight& w) const override;
  Result<exec::Weight> weight_from_bytes(const exec::Weight& like, std::span<const std::byte> bytes) override;

  void embed(const std::vector<int32_t>& tokens, const exec::Weight& table, int64_t vocab_first,
             exec::Buffer& out) override;
  void rms_norm(const exec::Buffer& x, const exec::Buffer& w, exec::Buffer& y, int n, int dim, float eps) override;
  void gemm(const exec::Buffer& x, const exec::Weight& w, const exec::Buffer* bias, exec::Buffer& y, int n) override;
  void gemm_multi(const exec::Buffer& x, std::span<const exec::GemmTarget> targets, int n) override;
  void gemm_glu(const exec::Buffer& x, const exec::Weight& gate_up, int64_t ff, exec::Buffer& y, int n) override;
  void gated_activation(exec::GatedActivation act, exec::Buffer& gate, const exec::Buffer& up, size_t count) override;
  void add(exec::Buffer& x, const exec::Buffer& y, size_t count) override;
  void scale(exec::Buffer& x, float factor, size_t count) override;
  void softcap(exec::Buffer& x, float cap, size_t count) override;
  void rope_and_store_kv(const ForwardBatch& batch, exec::Buffer& q, exec::Buffer& k, const exec::Buffer& v,
                         const exec::AttentionShape& shape, const exec::Buffer& inv_freq,
                         const exec::KvLayer& kv) override;
  void paged_attention(const ForwardBatch& batch, const exec::Buffer& q, exec::Buffer& out,
                       const exec::AttentionShape& shape, const exec::KvLayer& kv) override;
  void gather_rows(const exec::Buffer& src, std::span<const int32_t> rows, int dim, exec::Buffer& dst) override;
  void scatter_add_rows(const exec::Buffer& src, std::span<const int32_t> rows, std::span<const float> weights,
                        int dim, exec::Buffer& dst) override;
  void copy_columns(const exec::Buffer& src, size_t src_offset, int rows, int width, exec::Buffer& dst,
                    int dst_stride, int col_offset) override;
  void zero(exec::Buffer& b, size_t count) override;
  void row_bests(const exec::Buffer& x, int rows, int width, int32_t first_id, std::span<RowBest> out) override;
  // The rows are in host memory: executors/sampler.hpp's BatchSampler over the pool, in place.
  bool sample_rows(exec::Buffer& logits, int rows, int vocab, std::span<const SampleRequest> requests,
                   std::span<SampledToken> out) override;

  // The CPU's view of a Weight this backend made (tests, benchmarks, a plugin's own kernels).
  static const WeightMatrix& matrix_of(const exec::Weight& w);

  bool computes_in_host_memory() const override { return true; }
  bool stores_kv(DType) const override { return true; }

  // Running ahead (Backend::runs_ahead): off unless ACTORD_CPU_RUN_AHEAD=1 when the backend is made. The CPU has
  // computed a step when its forward pass returns, so running ahead only delays its result; on, it serves tests of
  // the worker's side of it. Host outputs are written at once; each deferred step's picks (greedy picks or sampled
  // tokens) are kept for the next.
  bool runs_ahead() const override { return run_ahead_; }
  bool samples_ahead(std::span<const SampleRequest> requests, int vocab) override;
  uint64_t defer_reads() override;
  void complete_reads(uint64_t ticket) override;

 protected:
  Allocation allocate(size_t n) override;
  void upload_into(std::span<const float> host, exec::Buffer& b) override;

 private:
  struct AttentionTask {
    int seq, head_begin, head_end;  // batch.seqs index, query heads [head_begin, head_end)
  };
  ThreadPool& pool_;
  Isa isa_;
  std::vector<AttentionTask> attention_tasks_;  // scratch (one caller at a time)
  bool run_ahead_ = false;
  uint64_t ticket_ = 0;                          // the last defer_reads()
  bool deferring_ = false;                       // ticket_ not completed: row_bests / sample_rows append to its picks
  std::vector<int32_t> picks_[2];                // the ids each deferred step picked, by its ticket's parity
  BatchSampler sampler_;
};

}  // namespace actord::cpu
