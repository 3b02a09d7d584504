#include "executors/cpu/cpu_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/kv_rows.hpp"
#include "core/large_buffer.hpp"
#include "executors/cpu/aligned_vector.hpp"
#include "executors/cpu/blocked_weights.hpp"
#include "executors/cpu/kernels.hpp"
#include "executors/cpu/quantized_weights.hpp"
#include "executors/cpu/thread_pool.hpp"
#include "executors/sampler.hpp"

namespace actord::cpu {

namespace {

// What an exec::Weight of this backend points to: the matrix as the kernels read it, and the memory of a blocked
// copy (empty for a matrix read in place).
struct CpuWeight {
  WeightMatrix matrix;
  LargeBuffer memory;
};

WeightMatrix row_major(const exec::HostMatrix& m) {
  WeightMatrix w;
  w.dtype = m.dtype;
  w.data = m.data;
  w.rows = m.rows;
  w.cols = m.cols;
  w.row_stride = m.row_stride;
  w.layout = WeightLayout::row_major;
  return w;
}

exec::Weight wrap(std::shared_ptr<CpuWeight> w, int64_t rows) {
  exec::Weight out;
  out.rows = rows;
  out.cols = w->matrix.cols;
  out.dtype = w->matrix.dtype;
  out.impl = std::move(w);
  return out;
}

}  // namespace

CpuBackend::CpuBackend(ThreadPool& pool, Isa isa) : pool_(pool), isa_(isa) {
  const char* ahead = std::getenv("ACTORD_CPU_RUN_AHEAD");
  run_ahead_ = ahead && std::string_view(ahead) == "1";
}

uint64_t CpuBackend::defer_reads() {
  ACTORD_CHECK(run_ahead_);
  ++ticket_;
  picks_[ticket_ & 1].clear();
  deferring_ = true;
  return ticket_;
}

void CpuBackend::complete_reads(uint64_t ticket) {
  if (ticket == ticket_) deferring_ = false;
}

std::string CpuBackend::describe() const {
  return std::string("cpu (") + isa_name(isa_) + ", " + std::to_string(pool_.size()) + " threads)";
}

const WeightMatrix& CpuBackend::matrix_of(const exec::Weight& w) {
  ACTORD_CHECK(w.impl != nullptr);
  return static_cast<const CpuWeight*>(w.impl.get())->matrix;
}

exec::Backend::Allocation CpuBackend::allocate(size_t n) {
  auto memory = std::make_shared<aligned_vector<float>>(n);
  float* data = memory->data();
  return {data, std::move(memory)};
}

void CpuBackend::upload_into(std::span<const float> host, exec::Buffer& b) {
  std::copy(host.begin(), host.end(), b.data());
}

void CpuBackend::download(const exec::Buffer& b, size_t offset, std::span<float> host) {
  ACTORD_CHECK(offset + host.size() <= b.size());
  std::copy_n(b.data() + offset, host.size(), host.data());
}

void CpuBackend::copy_bytes(void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); }

Result<exec::Weight> CpuBackend::upload_matrix(const exec::HostMatrix& m, exec::WeightUse use) {
  auto w = std::make_shared<CpuWeight>();
  if (use == exec::WeightUse::lookup) {
    w->matrix = row_major(m);
  } else {
    w->memory = LargeBuffer(blocked_bytes(m.dtype, m.rows, m.cols));
    w->matrix = pack_blocked(row_major(m), w->memory.data());
  }
  return wrap(std::move(w), m.rows);
}

Result<exec::Weight> CpuBackend::upload_glu(const exec::HostMatrix& gate, const exec::HostMatrix& up) {
  if (gate.dtype != up.dtype || gate.rows != up.rows || gate.cols != up.cols) {
    return make_error(Errc::invalid_argument, "upload_glu: gate and up differ in dtype or shape");
  }
  auto w = std::make_shared<CpuWeight>();
  w->memory = LargeBuffer(glu_bytes(gate.dtype, gate.rows, gate.cols));
  w->matrix = pack_glu(row_major(gate), row_major(up), w->memory.data());
  return wrap(std::move(w), gate.rows);
}

Result<exec::Weight> CpuBackend::upload_quantized(const QuantizedMatrix& m) {
  ACTORD_TRY_STATUS(m.validate());
  auto w = std::make_shared<CpuWeight>();
  w->memory = LargeBuffer(quantized_bytes(m));
  w->matrix = pack_quantized(m, w->memory.data());
  return wrap(std::move(w), m.rows);
}

Result<exec::Weight> CpuBackend::upload_quantized_glu(const QuantizedMatrix& gate, const QuantizedMatrix& up) {
  ACTORD_TRY_STATUS(gate.validate());
  ACTORD_TRY_STATUS(up.validate());
  if (gate.rows != up.rows || gate.cols != up.cols || gate.bits != up.bits || gate.group != up.group ||
      gate.affine() != up.affine()) {
    return make_error(Errc::invalid_argument, "upload_quantized_glu: gate and up differ in shape or quantization");
  }
  auto w = std::make_shared<CpuWeight>();
  w->memory = LargeBuffer(quantized_glu_bytes(gate));
  w->matrix = pack_quantized_glu(gate, up, w->memory.data());
  return wrap(std::move(w), gate.rows);
}

// A blocked (or fused) weight's memory: the layout is the same on every CPU, so another rank can use it as it is.
std::span<const std::byte> CpuBackend::weight_bytes(const exec::Weight& w) const {
  ACTORD_CHECK(w.impl != nullptr);
  const auto& cpu = *static_cast<const CpuWeight*>(w.impl.get());
  if (cpu.memory.size() == 0) return {};  // read in place from its file
  return {reinterpret_cast<const std::byte*>(cpu.memory.data()), cpu.memory.size()};
}

Result<exec::Weight> CpuBackend::weight_from_bytes(const exec::Weight& like, std::span<const std::byte> bytes) {
  const std::span<const std::byte> own = weight_bytes(like);
  if (own.empty() || own.size() != bytes.size()) {
    return make_error(Errc::invalid_argument, "weight_from_bytes: " + std::to_string(bytes.size()) +
                                                  " bytes for a weight of " + std::to_string(own.size()));
  }
  const auto& model = *static_cast<const CpuWeight*>(like.impl.get());
  auto w = std::make_shared<CpuWeight>();
  w->memory = LargeBuffer(bytes.size());
  std::memcpy(w->memory.data(), bytes.data(), bytes.size());
  w->matrix = model.matrix;
  w->matrix.data = w->memory.data();
  exec::Weight out = like;
  out.impl = std::move(w);
  return out;
}

void CpuBackend::embed(const std::vector<int32_t>& tokens, const exec::Weight& table, int64_t vocab_first,
                       exec::Buffer& out) {
  const WeightMatrix& w = matrix_of(table);
  const int64_t h = w.cols;
  ACTORD_CHECK(out.size() >= tokens.size() * static_cast<size_t>(h));
  const std::vector<int32_t>& previous = picks_[(ticket_ - 1) & 1];  // a previous_pick token's step
  for (size_t t = 0; t < tokens.size(); ++t) {
    int64_t id = tokens[t];
    if (is_previous_pick(tokens[t])) {
      ACTORD_CHECK(run_ahead_ && ticket_ >= 2 && previous_pick_row(tokens[t]) < previous.size());
      id = previous[previous_pick_row(tokens[t])];
    }
    float* row = out.data() + t * static_cast<size_t>(h);
    if (id >= vocab_first && id < vocab_first + w.rows) {
      weight_row_to_f32(w, id - vocab_first, row);
    } else {
      std::fill_n(row, h, 0.0f);
    }
  }
}

void CpuBackend::rms_norm(const exec::Buffer& x, const exec::Buffer& w, exec::Buffer& y, int n, int dim, float eps) {
  cpu::rms_norm(x.data(), w.data(), y.data(), n, dim, eps);
}

void CpuBackend::gemm(const exec::Buffer& x, const exec::Weight& w, const exec::Buffer* bias, exec::Buffer& y,
                      int n) {
  gemm_nt(x.data(), matrix_of(w), bias ? bias->data() : nullptr, y.data(), n, pool_, {isa_});
}

void CpuBackend::gemm_multi(const exec::Buffer& x, std::span<const exec::GemmTarget> targets, int n) {
  GemmOutput outputs[8];
  ACTORD_CHECK(targets.size() <= std::size(outputs));
  for (size_t i = 0; i < targets.size(); ++i) {
    const exec::GemmTarget& t = targets[i];
    outputs[i] = {&matrix_of(*t.w), t.bias && !t.bias->empty() ? t.bias->data() : nullptr, t.y->data()};
  }
  gemm_nt_multi(x.data(), outputs, static_cast<int>(targets.size()), n, pool_, {isa_});
}

void CpuBackend::gemm_glu(const exec::Buffer& x, const exec::Weight& gate_up, int64_t ff, exec::Buffer& y, int n) {
  gemm_nt_glu(x.data(), matrix_of(gate_up), ff, y.data(), n, pool_, isa_);
}

void CpuBackend::gated_activation(exec::GatedActivation act, exec::Buffer& gate, const exec::Buffer& up,
                                  size_t count) {
  float* g = gate.data();
  const float* u = up.data();
  const int n = static_cast<int>(count);
  switch (act) {
    case exec::GatedActivation::silu:
      silu_mul(g, u, n);
      return;
    case exec::GatedActivation::gelu_tanh:
      gelu_tanh_mul(g, u, n);
      return;
    case exec::GatedActivation::gelu:
      for (int i = 0; i < n; ++i) g[i] = 0.5f * g[i] * (1.0f + std::erf(g[i] * 0.70710678f)) * u[i];
      return;
  }
}

void CpuBackend::add(exec::Buffer& x, const exec::Buffer& y, size_t count) {
  add_inplace(x.data(), y.data(), static_cast<int>(count));
}

void CpuBackend::scale(exec::Buffer& x, float factor, size_t count) {
  float* p = x.data();
  for (size_t i = 0; i < count; ++i) p[i] *= factor;
}

void CpuBackend::softcap(exec::Buffer& x, float cap, size_t count) {
  softcap_inplace(x.data(), cap, count);
}

void CpuBackend::rope_and_store_kv(const ForwardBatch& batch, exec::Buffer& q, exec::Buffer& k, const exec::Buffer& v,
                                   const exec::AttentionShape& shape, const exec::Buffer& inv_freq,
                                   const exec::KvLayer& kv) {
  const int hd = shape.head_dim, nh = shape.n_heads, nkv = shape.n_kv_heads, rd = shape.rotary();
  const size_t q_dim = size_t(nh) * hd, kv_dim = size_t(nkv) * hd;
  const int bs = kv.block_size;
  const size_t esize = dtype_size(kv.dtype);
  auto* k_base = static_cast<unsigned char*>(kv.k_base);
  auto* v_base = static_cast<unsigned char*>(kv.v_base);
  for (const SeqSlice& s : batch.seqs) {
    for (int i = 0; i < s.num_tokens; ++i) {
      const int t = s.first_token + i, pos = s.start_pos + i;
      float* k_row = k.data() + size_t(t) * kv_dim;
      const float* v_row = v.data() + size_t(t) * kv_dim;
      rope_rotate_half(q.data() + size_t(t) * q_dim, nh, hd, rd, pos, inv_freq.data(), shape.rotary_scale);
      rope_rotate_half(k_row, nkv, hd, rd, pos, inv_freq.data(), shape.rotary_scale);
      const int64_t block = s.block_table[pos / bs];
      const int64_t slot = pos % bs;
      for (int g = 0; g < nkv; ++g) {
        const size_t head = size_t(block * kv.block_stride + g * kv.head_stride) * esize;  // the head's region
        store_kv_row(kv.dtype, k_row + size_t(g) * hd, hd, bs, k_base + head, int(slot));
        store_kv_row(kv.dtype, v_row + size_t(g) * hd, hd, bs, v_base + head, int(slot));
      }
    }
  }
}

void CpuBackend::paged_attention(const ForwardBatch& batch, const exec::Buffer& q, exec::Buffer& out,
                                 const exec::AttentionShape& shape, const exec::KvLayer& kv) {
  const int nh = shape.n_heads, nkv = shape.n_kv_heads, hd = shape.head_dim;
  const size_t q_dim = size_t(nh) * hd;
  // Tasks of (sequence, query heads): a prefill's heads one by one (its queries one after the other), a decode's in
  // groups (one sequential read of each K/V block for all of them).
  int n_decode = 0;
  for (const SeqSlice& s : batch.seqs) n_decode += s.num_tokens == 1;
  const int decode_heads = decode_heads_per_task(nh, nkv, std::max(1, n_decode), pool_.size());
  attention_tasks_.clear();
  for (int i = 0; i < static_cast<int>(batch.seqs.size()); ++i) {
    const int step = batch.seqs[i].num_tokens == 1 ? decode_heads : 1;
    for (int h = 0; h < nh; h += step) attention_tasks_.push_back({i, h, std::min(nh, h + step)});
  }
  pool_.parallel_for(static_cast<int>(attention_tasks_.size()), [&](int task) {
    const AttentionTask& at = attention_tasks_[task];
    const SeqSlice& s = batch.seqs[at.seq];
    PagedAttentionParams p;
    p.q = q.data() + size_t(s.first_token) * q_dim;
    p.out = out.data() + size_t(s.first_token) * q_dim;
    p.n_tokens = s.num_tokens;
    p.start_pos = s.start_pos;
    p.n_heads = nh;
    p.n_kv_heads = nkv;
    p.head_begin = at.head_begin;
    p.head_end = at.head_end;
    p.sliding_window = shape.sliding_window;
    p.logit_softcap = shape.logit_softcap;
    p.head_dim = hd;
    p.block_size = kv.block_size;
    p.block_table = s.block_table;
    p.k_base = kv.k_base;
    p.v_base = kv.v_base;
    p.kv_dtype = kv.dtype;
    p.block_stride = kv.block_stride;
    p.head_stride = kv.head_stride;
    cpu::paged_attention(p, isa_);
  });
}

void CpuBackend::gather_rows(const exec::Buffer& src, std::span<const int32_t> rows, int dim, exec::Buffer& dst) {
  ACTORD_CHECK(dst.size() >= rows.size() * size_t(dim));
  for (size_t i = 0; i < rows.size(); ++i) {
    std::copy_n(src.data() + size_t(rows[i]) * dim, dim, dst.data() + i * size_t(dim));
  }
}

void CpuBackend::scatter_add_rows(const exec::Buffer& src, std::span<const int32_t> rows,
                                  std::span<const float> weights, int dim, exec::Buffer& dst) {
  ACTORD_CHECK(rows.size() == weights.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    float* d = dst.data() + size_t(rows[i]) * dim;
    const float* s = src.data() + i * size_t(dim);
    const float w = weights[i];
    for (int c = 0; c < dim; ++c) d[c] += w * s[c];
  }
}

void CpuBackend::copy_columns(const exec::Buffer& src, size_t src_offset, int rows, int width, exec::Buffer& dst,
                              int dst_stride, int col_offset) {
  for (int r = 0; r < rows; ++r) {
    std::copy_n(src.data() + src_offset + size_t(r) * width, width,
                dst.data() + size_t(r) * dst_stride + col_offset);
  }
}

void CpuBackend::zero(exec::Buffer& b, size_t count) { std::fill_n(b.data(), count, 0.0f); }

bool CpuBackend::sample_rows(exec::Buffer& logits, int rows, int vocab, std::span<const SampleRequest> requests,
                             std::span<SampledToken> out) {
  if (rows < 0 || requests.size() != size_t(rows) || out.size() != size_t(rows) ||
      logits.size() < size_t(rows) * size_t(vocab))
    return false;
  sampler_.sample_rows(logits.data(), vocab, requests, out, pool_);
  if (deferring_) {
    for (int r = 0; r < rows; ++r) picks_[ticket_ & 1].push_back(out[size_t(r)].token);
  }
  return true;
}

bool CpuBackend::samples_ahead(std::span<const SampleRequest> requests, int vocab) {
  (void)vocab;
  return run_ahead_ && std::all_of(requests.begin(), requests.end(), [](const SampleRequest& r) {
           return r.options && r.options->logprobs < 0;  // a token only: what a device's picks carry
         });
}

void CpuBackend::row_bests(const exec::Buffer& x, int rows, int width, int32_t first_id, std::span<RowBest> out) {
  ACTORD_CHECK(out.size() >= size_t(std::max(rows, 0)));
  pool_.parallel_for(rows, [&](int r) { out[size_t(r)] = row_best(x.data() + size_t(r) * width, width, first_id); });
  if (deferring_) {
    for (int r = 0; r < rows; ++r) picks_[ticket_ & 1].push_back(out[size_t(r)].id);
  }
}

}  // namespace actord::cpu
