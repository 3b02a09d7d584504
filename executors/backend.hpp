// The executor backend: the primitives a model builds its forward pass from, and the memory they work in. The CPU
// backend (executors/cpu/cpu_backend.hpp) is one implementation; a device backend (CUDA) is another. A model never
// reads a Buffer or a Weight itself: it hands them to these primitives and to the collectives of its ForwardContext
// (whose spans point into the backend's memory), and reads results on the host only through download().
//
// Contract:
// - One backend per worker rank, used by one thread at a time (the worker's). Primitives may run asynchronously on
//   a device; download() and the collectives see every earlier primitive's result (a backend orders them).
// - Shapes are row-major; n is the number of token rows. y = x W^T (+ b) is the HF Linear layout: a Weight is
//   [rows = output features, cols = input features].
// - A Weight is made once at load (upload_matrix, upload_glu) from a row-major host matrix in f32, bf16 or f16; the
//   backend keeps its own copy in its own layout, except where keeps_host_view() says it reads the host matrix in
//   place (the CPU backend's lookup-only embedding): that memory must then outlive the Weight.
// - Buffers hold f32. reserve() grows a buffer to at least n elements (its contents are not kept when it grows).
// - Programming errors (mismatched sizes) are CHECKed; the primitives return nothing. Errors are values only where
//   input from outside arrives (upload of an unsupported dtype).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/quantization.hpp"
#include "core/status.hpp"
#include "executors/forward_batch.hpp"
#include "executors/row_best.hpp"
#include "executors/sampler.hpp"

namespace actord::exec {

enum class DeviceKind { cpu, cuda };

// f32 elements in the backend's memory (host memory on the CPU, device memory on a GPU).
class Buffer {
 public:
  Buffer() = default;
  float* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // The first n elements, for a collective (n <= size()).
  std::span<float> first(size_t n) const { return {data_, n}; }

 private:
  friend class Backend;
  float* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<void> owner_;  // frees the memory
};

// A row-major matrix in host memory, as a weight file (or a dtype conversion of it) holds it: rows row_stride
// elements apart (0: cols).
struct HostMatrix {
  DType dtype = DType::f32;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;
};

// What a Weight is used for: multiplied (gemm), or only read row by row (an untied embedding's lookups).
enum class WeightUse { gemm, lookup };

// A [rows, cols] matrix in the backend's memory and layout. impl is the backend's own description of it.
struct Weight {
  int64_t rows = 0;
  int64_t cols = 0;
  DType dtype = DType::f32;
  std::shared_ptr<const void> impl;
  explicit operator bool() const { return impl != nullptr; }
};

// One output of gemm_multi: y = x W^T (+ bias).
struct GemmTarget {
  const Weight* w = nullptr;
  const Buffer* bias = nullptr;  // [w->rows] or null
  Buffer* y = nullptr;           // [n, w->rows]
};

enum class GatedActivation { silu, gelu_tanh, gelu };

// One layer of a paged KV cache (memory/kv_cache.hpp's layout, in the backend's memory): the row of kv head g at
// slot s of block b starts at base + b * block_stride + g * head_stride + s * head_dim elements of dtype; an i8
// head region ends with its rows' scales (core/kv_rows.hpp).
struct KvLayer {
  void* k_base = nullptr;
  void* v_base = nullptr;
  DType dtype = DType::f32;
  int block_size = 0;
  int64_t block_stride = 0;
  int64_t head_stride = 0;
};

// The attention of one layer of one rank: its query and KV heads and the layer's window.
struct AttentionShape {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int sliding_window = 0;  // > 0: position p sees only positions p - sliding_window + 1 .. p
  float logit_softcap = 0.0f;  // > 0: each score s becomes cap tanh(s / cap) before the softmax (CPU only so far)
  int rotary_dim = 0;          // the leading dimensions of each head RoPE rotates (even, <= head_dim); 0: head_dim
  int rotary() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  float rotary_scale = 1.0f;   // cos and sin multiplied by this (LongRoPE's and YaRN's attention factor)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string describe() const = 0;  // e.g. "cpu (avx512, 2 threads)"

  // ---- memory ----
  void reserve(Buffer& b, size_t n);
  Buffer upload(std::span<const float> host);
  virtual void download(const Buffer& b, size_t offset, std::span<float> host) = 0;
  // A Buffer over the caller's host memory (no copy, not owned: valid while that memory is), when this backend
  // computes in host memory; nullopt otherwise (then compute into a Buffer of its own and download()).
  std::optional<Buffer> host_view(std::span<float> host) const;
  // Whether buffers are host memory (the CPU backend): host_view() works, collectives take buffers' spans directly.
  virtual bool computes_in_host_memory() const = 0;
  // The most tokens a model's forward pass gives this backend in one piece: a step of more tokens (a big prefill)
  // runs as consecutive pieces of at most this many, so activations stay bounded by it. Small for caches (the CPU's
  // default); a GPU takes thousands, its products filling the device only from that many rows.
  virtual int forward_piece_tokens() const { return 512; }

  // Whether rope_and_store_kv and paged_attention take a KV cache of `dtype`: every float dtype; i8 (codes with a
  // scale per row) where a backend says so.
  virtual bool stores_kv(DType dtype) const { return dtype != DType::i8; }

  // Zeroed memory of `bytes` in this backend's device, for a KV cache; nullopt when the backend computes in host
  // memory (the caller then uses the host's). copy_bytes() moves bytes between it and the host, either way, in order
  // with the primitives queued before it (it waits for them).
  struct DeviceBytes {
    unsigned char* data = nullptr;
    std::shared_ptr<void> owner;
  };
  virtual Result<std::optional<DeviceBytes>> allocate_device_bytes(size_t bytes) {
    (void)bytes;
    return std::optional<DeviceBytes>{};
  }
  virtual void copy_bytes(void* dst, const void* src, size_t n) = 0;

  // ---- weights (at load) ----
  virtual Result<Weight> upload_matrix(const HostMatrix& m, WeightUse use) = 0;
  // A gated MLP's gate and up projections ([ff, cols] each, same dtype) as one weight for gemm_glu.
  virtual Result<Weight> upload_glu(const HostMatrix& gate, const HostMatrix& up) = 0;
  // A quantized matrix (core/quantization.hpp: codes, f16 scales and offsets) for gemm, and gate and up ones (same
  // bits, group and symmetry) for gemm_glu; the backend keeps them in its own layout. Errc::unsupported where a
  // backend has no quantized kernels.
  virtual Result<Weight> upload_quantized(const QuantizedMatrix& m) {
    (void)m;
    return make_error(Errc::unsupported, describe() + " has no kernels for quantized weights");
  }
  virtual Result<Weight> upload_quantized_glu(const QuantizedMatrix& gate, const QuantizedMatrix& up) {
    (void)gate;
    (void)up;
    return make_error(Errc::unsupported, describe() + " has no kernels for quantized weights");
  }
  // Whether upload_matrix(m, use) reads m's memory in place afterwards (the caller then keeps it alive).
  virtual bool keeps_host_view(WeightUse use) const = 0;
  // Moving weights between ranks of the same backend kind (EPLB): a weight's bytes as this backend holds them
  // (its own layout; empty when it cannot hand them out, e.g. a matrix read in place from its file), and a weight
  // made of such bytes with the dtype, shape and layout of `like`, one of this rank's own weights (an error when the
  // byte count differs). Layouts are the same on every rank of a backend kind, whatever its instruction set.
  virtual std::span<const std::byte> weight_bytes(const Weight& w) const {
    (void)w;
    return {};
  }
  virtual Result<Weight> weight_from_bytes(const Weight& like, std::span<const std::byte> bytes) {
    (void)like;
    (void)bytes;
    return make_error(Errc::unsupported, describe() + " cannot make weights of another rank's bytes");
  }

  // ---- primitives ----
  // The batch the following primitives run on, until the next begin_step (a device backend uploads its positions
  // and block tables here once, instead of in every layer's primitives). The batch must stay alive and unchanged
  // until then.
  virtual void begin_step(const ForwardBatch& batch) { (void)batch; }
  // out[n, h] = the rows of `table` for the tokens; a token outside [vocab_first, vocab_first + table.rows) (another
  // TP rank's vocabulary part) gets a zero row. A previous_pick(k) token (only where runs_ahead()) is row k's id of
  // the picks of the last defer_reads() before the current one.
  virtual void embed(const std::vector<int32_t>& tokens, const Weight& table, int64_t vocab_first, Buffer& out) = 0;
  // y[r] = x[r] / rms(x[r]) * w, r < n rows of dim elements. y may be x.
  virtual void rms_norm(const Buffer& x, const Buffer& w, Buffer& y, int n, int dim, float eps) = 0;
  // y = x W^T (+ bias), x [n, W.cols].
  virtual void gemm(const Buffer& x, const Weight& w, const Buffer* bias, Buffer& y, int n) = 0;
  // y += x W^T, x [n, W.cols], y [n, W.rows]: a product added to the residual stream it updates. scratch is the
  // caller's room of n * W.rows floats a backend may use for the product (the default: the product there, then
  // add()); a device backend adds it in the product's own epilogue instead, a launch fewer.
  virtual void gemm_accumulate(const Buffer& x, const Weight& w, Buffer& y, int n, Buffer& scratch) {
    gemm(x, w, nullptr, scratch, n);
    add(y, scratch, size_t(n) * size_t(w.rows));
  }
  // Several products of the same x (q, k and v).
  virtual void gemm_multi(const Buffer& x, std::span<const GemmTarget> targets, int n) = 0;
  // y[n, ff] = silu(x gate^T) * (x up^T) for a weight of upload_glu.
  virtual void gemm_glu(const Buffer& x, const Weight& gate_up, int64_t ff, Buffer& y, int n) = 0;
  // gate[i] = act(gate[i]) * up[i], i < count.
  virtual void gated_activation(GatedActivation act, Buffer& gate, const Buffer& up, size_t count) = 0;
  // x[i] += y[i], i < count.
  virtual void add(Buffer& x, const Buffer& y, size_t count) = 0;
  // x[i] *= factor, i < count.
  virtual void scale(Buffer& x, float factor, size_t count) = 0;
  // x[i] = cap tanh(x[i] / cap), i < count (Gemma 2's logit cap).
  virtual void softcap(Buffer& x, float cap, size_t count) = 0;
  // Rotates q [n, n_heads * head_dim] and k [n, n_kv_heads * head_dim] by each token's position (rotate-half RoPE
  // of each head's first shape.rotary() elements with inv_freq [rotary() / 2], cos and sin times
  // shape.rotary_scale, the rest unchanged) and writes k and v into the cache at the token's block and slot. `batch`
  // is the one begin_step() named, as for paged_attention.
  virtual void rope_and_store_kv(const ForwardBatch& batch, Buffer& q, Buffer& k, const Buffer& v,
                                 const AttentionShape& shape, const Buffer& inv_freq, const KvLayer& kv) = 0;
  // out [n, n_heads * head_dim] = causal attention of q over each sequence's cached K/V.
  virtual void paged_attention(const ForwardBatch& batch, const Buffer& q, Buffer& out, const AttentionShape& shape,
                               const KvLayer& kv) = 0;
  // dst[i] = src[rows[i]], rows of `dim` elements.
  virtual void gather_rows(const Buffer& src, std::span<const int32_t> rows, int dim, Buffer& dst) = 0;
  // dst[rows[i]] += weights[i] * src[i], rows of `dim` elements (rows may repeat; applied in order).
  virtual void scatter_add_rows(const Buffer& src, std::span<const int32_t> rows, std::span<const float> weights,
                                int dim, Buffer& dst) = 0;
  // dst[r, col_offset + c] = src[r, c] for r < rows, c < width; dst rows dst_stride apart.
  virtual void copy_columns(const Buffer& src, size_t src_offset, int rows, int width, Buffer& dst, int dst_stride,
                            int col_offset) = 0;
  // Zeroes the first count elements.
  virtual void zero(Buffer& b, size_t count) = 0;
  // For each of `rows` rows of x ([rows, width]): its highest value and first_id + the lowest column holding it, NaN
  // ignored ({-inf, first_id} for a row without any other value); into host memory (out: rows entries). The greedy
  // pick over those columns, without bringing the rows to the host.
  virtual void row_bests(const Buffer& x, int rows, int width, int32_t first_id, std::span<RowBest> out) = 0;
  // ---- running ahead of the host (a device backend whose primitives run asynchronously) ----
  // Whether defer_reads() works. After t = defer_reads() and until complete_reads(t), the row_bests calls of one
  // step (one per piece of its forward pass) append their rows to the step's picks, kept in the backend's memory;
  // their host outputs must stay where they are and are complete once complete_reads(t) returns, which waits only
  // for the work queued before them (a device writes them then, the CPU at once). The next step, deferred too, may
  // name a token previous_pick(k) (forward_batch.hpp): row k's id of those picks, which embed() resolves where it
  // runs, in order with the work that made it. So the host queues step N + 1 before it reads step N's tokens, and
  // the device does not wait for the host between them. sample_rows while deferring does the same with the tokens it
  // draws, when samples_ahead(requests) said it would take them all: row k of the picks is row k's token, and `out`
  // gets the tokens (no logprobs) by complete_reads(t); otherwise it returns false as when it does not sample.
  virtual bool runs_ahead() const { return false; }
  // Whether sample_rows, called while deferring, would draw every row of these requests where the logits are and
  // leave them in the step's picks (no row left to the host: a device that runs ahead and can sample them all).
  virtual bool samples_ahead(std::span<const SampleRequest> requests, int vocab) {
    (void)requests, (void)vocab;
    return false;
  }
  virtual uint64_t defer_reads() { return 0; }
  virtual bool reads_done(uint64_t ticket) { (void)ticket; return true; }  // complete_reads(ticket) will not wait
  virtual void complete_reads(uint64_t ticket) { (void)ticket; }
  // Samples rows of whole logits [rows, vocab] (requests / out: one per row) where they are, as executors/sampler.hpp
  // does (penalties and masks applied to the rows in place; tokens deterministic per request and seed): true when it
  // did; false, having changed nothing, when this backend does not (the caller downloads the logits and samples them).
  virtual bool sample_rows(Buffer& logits, int rows, int vocab, std::span<const SampleRequest> requests,
                           std::span<SampledToken> out) {
    (void)logits, (void)rows, (void)vocab, (void)requests, (void)out;
    return false;
  }

 protected:
  // Memory of n floats and what frees it (a backend's allocator).
  struct Allocation {
    float* data = nullptr;
    std::shared_ptr<void> owner;
  };
  virtual Allocation allocate(size_t n) = 0;
  virtual void upload_into(std::span<const float> host, Buffer& b) = 0;
};

}  // namespace actord::exec
