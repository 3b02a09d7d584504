#include "executors/cuda/cuda_backend.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "executors/cuda/checked_path.hpp"
#include "executors/cuda/cuda_kernels.cuh"
#include "executors/cuda/deferred_picks.hpp"
#include "executors/cuda/device_memory.hpp"
#include "executors/cuda/device_row_sampler.hpp"
#include "executors/cuda/kernel_times.hpp"
#include "executors/cuda/long_prefill_attention.cuh"
#include "executors/cuda/step_graphs.hpp"
#include "executors/cpu/thread_pool.hpp"

namespace actord::cuda {

namespace {

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    case DType::i8: break;  // no weight is i8
  }
  return CUDA_R_32F;
}

// What an exec::Weight of this backend points to: a row-major [rows, cols] matrix in device memory.
struct CudaWeight {
  void* data = nullptr;
  DType dtype = DType::f32;
  int64_t rows = 0, cols = 0;
  ~CudaWeight() {
    if (data) cudaFree(data);
  }
};

const CudaWeight& weight_of(const exec::Weight& w) {
  ACTORD_CHECK(w.impl != nullptr);
  return *static_cast<const CudaWeight*>(w.impl.get());
}

// One product of the small-batch kernel: y = x w^T (+ bias).
void add_target(SmallBatchTargets& targets, const CudaWeight& w, const float* bias, float* y) {
  targets.w[targets.count] = w.data;
  targets.bias[targets.count] = bias;
  targets.y[targets.count] = y;
  targets.rows[targets.count] = static_cast<int>(w.rows);
  ++targets.count;
}

class CudaBackend final : public exec::Backend {
 public:
  CudaBackend(int device, cpu::ThreadPool* pool) : device_(device), pool_(pool) {
    if (!pool_) {
      own_pool_ = std::make_unique<cpu::ThreadPool>(1);
      pool_ = own_pool_.get();
    }
    ACTORD_CUDA_CHECK(cudaSetDevice(device_));
    ACTORD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    row_sampler_ = std::make_unique<DeviceRowSampler>(device_, stream_, *pool_);
    picks_ = std::make_unique<DeferredPicks>(stream_);
    ACTORD_CUBLAS_CHECK(cublasCreate(&blas_));
    ACTORD_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    // A workspace of its own, so that cuBLAS allocates nothing while a step is captured as a graph.
    blas_workspace_ = device_memory(kBlasWorkspaceBytes);
    ACTORD_CUBLAS_CHECK(cublasSetWorkspace(blas_, blas_workspace_.get(), kBlasWorkspaceBytes));
    graphs_ = std::make_unique<StepGraphs>(
        stream_, device_,
        [this](const float* a, const float* b, size_t n, float* diff) {
          max_difference(a, b, 0, 1, static_cast<int>(n), diff, stream_);
        },
        [this] { upload_queued_indices(); });
    if (times_.on()) graphs_->disable("off: ACTORD_CUDA_PROFILE times every primitive");
    // Plain f32 products stay f32 (no TF32): an f32 model keeps its reference outputs.
    ACTORD_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
    ACTORD_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, device_));
    enable_paths(std::getenv("ACTORD_CUDA_ENABLE"));
    disable_paths(std::getenv("ACTORD_CUDA_DISABLE"));
  }
  // ACTORD_CUDA_ENABLE=name,...: paths that are off until a GPU run has validated them (ACTORD_CUDA_DISABLE wins):
  // early_launch (small-batch products launched while the kernel before them runs, streaming their first weights
  // meanwhile; they then read x with plain loads, which cost more at batch 1 than the early start gains: H100,
  // 147.4 vs 157.3 tok/s launched after).
  void enable_paths(const char* list) {
    if (!list) return;
    const std::string names = std::string(",") + list + ",";
    if (names.find(",early_launch,") != std::string::npos) early_launch_on_ = true;
  }
  // ACTORD_CUDA_DISABLE=name,name...: the paths named fall back to the general ones (to measure a path against its
  // fallback in one run, or to step around one): small_batch (cuBLAS for every product), prefill_tiles (one warp per
  // query for prefills too), long_prefill (the cuBLAS path for long prefills: FMA tiles where flash_prefill is
  // off or does not fit), flash_prefill (the one-kernel tensor-core attention of long prefills: the cuBLAS path
  // instead), split_decode (one warp per decode), device_sampling (logits downloaded and sampled by the worker),
  // step_graphs (every launch on its own instead of a decode step's launches as one CUDA graph), run_ahead (the
  // worker reads each step's tokens before it queues the next: runs_ahead() false), early_launch (small-batch
  // products start only when the kernel before them has ended, not streaming their first weights meanwhile).
  void disable_paths(const char* list) {
    if (!list) return;
    std::string names = list;
    for (size_t at = 0; at <= names.size();) {
      const size_t end = std::min(names.find(',', at), names.size());
      const std::string name = names.substr(at, end - at);
      at = end + 1;
      if (name.empty()) continue;
      if (name == "small_batch") {
        small_batch_on_ = false;
      } else if (name == "prefill_tiles") {
        tiles_on_ = false;
      } else if (name == "long_prefill") {
        long_prefill_path_.disable("off: ACTORD_CUDA_DISABLE");
      } else if (name == "split_decode") {
        split_decode_path_.disable("off: ACTORD_CUDA_DISABLE");
      } else if (name == "flash_prefill") {
        flash_prefill_path_.disable("off: ACTORD_CUDA_DISABLE");
      } else if (name == "device_sampling") {
        row_sampler_->disable("off: ACTORD_CUDA_DISABLE");
      } else if (name == "step_graphs") {
        graphs_->disable("off: ACTORD_CUDA_DISABLE");
      } else if (name == "run_ahead") {
        run_ahead_on_ = false;
      } else if (name == "early_launch") {
        early_launch_on_ = false;
      } else {
        std::string known;
        for (const std::string& path : path_names()) known += (known.empty() ? "" : ", ") + path;
        std::fprintf(stderr, "cuda:%d: ACTORD_CUDA_DISABLE: unknown path '%s' (%s)\n", device_, name.c_str(),
                     known.c_str());
      }
    }
  }
  ~CudaBackend() override {
    if (const char* report = std::getenv("ACTORD_CUDA_REPORT"); report && *report && std::strcmp(report, "0") != 0) {
      std::fprintf(stderr, "cuda:%d: step graphs %s: %ld replays, %ld captures, %ld chunks launch by launch\n",
                   device_, graphs_->state().c_str(), graphs_->replays(), graphs_->captures(),
                   graphs_->eager_chunks());
    }
    graphs_.reset();
    picks_.reset();
    cudaStreamSynchronize(stream_);
    times_.report();
    cublasDestroy(blas_);
    cudaStreamDestroy(stream_);
  }

  exec::DeviceKind kind() const override { return exec::DeviceKind::cuda; }
  int device() const { return device_; }
  const std::string& long_prefill_state() const { return long_prefill_path_.state; }
  const std::string& split_decode_state() const { return split_decode_path_.state; }
  const std::string& flash_prefill_state() const { return flash_prefill_path_.state; }
  const std::string& device_sampling_state() const { return row_sampler_->state(); }
  const StepGraphs& graphs() const { return *graphs_; }
  StepGraphs& graphs() { return *graphs_; }
  cudaStream_t stream() const { return stream_; }
  std::string describe() const override {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device_);
    return "cuda:" + std::to_string(device_) + " (" + prop.name + ")";
  }

  void download(const exec::Buffer& b, size_t offset, std::span<float> host) override {
    ACTORD_CHECK(offset + host.size() <= b.size());
    flush_queue({b.data() + offset, host.size()});
    KernelTimed timed(times_, "download", stream_);
    ACTORD_CUDA_CHECK(cudaMemcpyAsync(host.data(), b.data() + offset, host.size_bytes(), cudaMemcpyDeviceToHost, stream_));
    ACTORD_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  Result<std::optional<DeviceBytes>> allocate_device_bytes(size_t bytes) override {
    flush_queue();
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError();
      return make_error(Errc::out_of_memory, "cuda:" + std::to_string(device_) + ": no room for " +
                                                 std::to_string(bytes) + " bytes of KV cache");
    }
    ACTORD_CUDA_CHECK(cudaMemset(p, 0, bytes));
    DeviceBytes out;
    out.data = static_cast<unsigned char*>(p);
    out.owner = std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
    return std::optional<DeviceBytes>(std::move(out));
  }
  void copy_bytes(void* dst, const void* src, size_t n) override {
    flush_queue();
    ACTORD_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream_));
    ACTORD_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  Result<exec::Weight> upload_matrix(const exec::HostMatrix& m, exec::WeightUse) override {
    return upload_rows({&m}, m.rows);
  }
  Result<exec::Weight> upload_glu(const exec::HostMatrix& gate, const exec::HostMatrix& up) override {
    if (gate.dtype != up.dtype || gate.rows != up.rows || gate.cols != up.cols) {
      return make_error(Errc::invalid_argument, "upload_glu: gate and up differ in dtype or shape");
    }
    return upload_rows({&gate, &up}, gate.rows);  // [2 ff, cols]: gate rows, then up rows
  }
  bool keeps_host_view(exec::WeightUse) const override { return false; }

  void begin_step(const ForwardBatch& batch) override {
    flush_queue();  // what a step left queued (it read nothing back) runs before its layout is replaced
    times_.collect();
    const int n = static_cast<int>(batch.tokens.size());
    // Short decodes are split until their warps (one per split and head) about fill the GPU: kSplitWarpsPerSm.
    plan_ = plan_attention(batch, multiprocessors_ * kSplitWarpsPerSm / std::max(1, heads_));
    const std::vector<int32_t>& words = plan_.words;
    reserve_bytes(meta_, meta_bytes_, words.size() * sizeof(int32_t));
    ACTORD_CUDA_CHECK(cudaMemcpyAsync(meta_.get(), words.data(), words.size() * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, stream_));
    const auto* base = static_cast<const int32_t*>(meta_.get());
    step_ = StepLayout{};
    step_.tokens = base;
    step_.token_seq = base + n;
    step_.token_pos = base + 2 * n;
    step_.n = n;
    step_.seq_tiled = base + plan_.flags_at;
    step_.tiles = base + plan_.tiles_at;
    step_.n_tiles = plan_.n_tiles;
    step_.splits = base + plan_.splits_at;
    step_.n_splits = plan_.n_splits;
    batch_ = &batch;
    tables_block_size_ = 0;  // uploaded at the first use, when the block size is known
    // Steps without prefill tiles (decodes, short chunks) and without split decodes are graphed: their launches
    // depend on n, the layout's place and the attention plan's counts besides the primitives' own arguments. Split
    // decodes (a few short decodes, or long contexts) change their plan every few steps as contexts grow: measured
    // on an H100 at batch 1, a quarter of the chunks were then captured anew or run one by one, and the step was
    // slower than launch by launch.
    const bool splits = plan_.n_splits > 0 && split_decode_path_.on;
    graphs_->begin(plan_.n_tiles == 0 && plan_.long_seqs.empty() && !splits);
    graphs_->note(kStepTag, step_.tokens, step_.token_seq, step_.token_pos, step_.seq_tiled, step_.tiles,
                  step_.splits, step_.n, step_.n_tiles, step_.n_splits, plan_.tiled_tokens, plan_.split_tokens,
                  split_decode_path_.on);
  }

  void embed(const std::vector<int32_t>& tokens, const exec::Weight& table, int64_t vocab_first,
             exec::Buffer& out) override {
    ACTORD_CHECK(batch_ && tokens.size() == size_t(step_.n));
    const CudaWeight* w = &weight_of(table);
    float* y = out.data();
    const RowBest* picks = picks_->previous();
    for (int32_t token : tokens) {
      ACTORD_CHECK(!is_previous_pick(token) || (picks && previous_pick_row(token) < uint32_t(picks_->previous_rows())));
    }
    graphs_->note(kEmbedTag, w->data, vocab_first, y, picks);
    graphs_->run([this, step = step_, picks, w, vocab_first, y] {
      KernelTimed timed(times_, "embed", stream_);
      launch_embed(step, picks, w->data, w->dtype, vocab_first, w->rows, static_cast<int>(w->cols), y, stream_);
    });
  }
  void rms_norm(const exec::Buffer& x, const exec::Buffer& w, exec::Buffer& y, int n, int dim, float eps) override {
    const float *xp = x.data(), *wp = w.data();
    float* yp = y.data();
    graphs_->note(kNormTag, xp, wp, yp, n, dim, eps);
    graphs_->run([=, this] {
      KernelTimed timed(times_, "rms_norm", stream_);
      launch_rms_norm(xp, wp, yp, n, dim, eps, stream_);
    });
  }
  void gemm(const exec::Buffer& x, const exec::Weight& w, const exec::Buffer* bias, exec::Buffer& y, int n) override {
    one_product(x, weight_of(w), bias, y, n, false);
  }
  // y += x W^T in the product's epilogue: the small-batch kernel adds to y as it writes, cuBLAS with beta = 1.
  void gemm_accumulate(const exec::Buffer& x, const exec::Weight& w, exec::Buffer& y, int n,
                       exec::Buffer& scratch) override {
    (void)scratch;
    one_product(x, weight_of(w), nullptr, y, n, true);
  }
  // y (+)= x W^T (+ bias): the small-batch kernel up to its rows, else cuBLAS and the bias after.
  void one_product(const exec::Buffer& x, const CudaWeight& cw, const exec::Buffer* bias, exec::Buffer& y, int n,
                   bool accumulate) {
    const bool small = small_batch(cw, x, n);
    const char* name = small ? (accumulate ? "gemm_accumulate (small batch)" : "gemm (small batch)")
                             : (accumulate ? "gemm_accumulate (cuBLAS)" : "gemm (cuBLAS)");
    const CudaWeight* w = &cw;
    const float* xp = x.data();
    const float* bp = bias && !bias->empty() ? bias->data() : nullptr;
    float* yp = y.data();
    void* room = small ? nullptr : rounding_room(cw, n);
    graphs_->note(kProductTag, w->data, xp, bp, yp, room, n, accumulate, small);
    graphs_->run([=, this] {
      KernelTimed timed(times_, name, stream_);
      if (small) {
        SmallBatchTargets one;
        add_target(one, *w, bp, yp);
        one.accumulate[0] = accumulate;
        launch_small_batch_gemm(one, w->dtype, xp, n, static_cast<int>(w->cols), stream_, early_launch_on_);
        return;
      }
      cublas_product(xp, room, *w, yp, n, accumulate);
      if (bp) launch_add_bias(yp, bp, n, static_cast<int>(w->rows), stream_);
    });
  }
  // Products of one x with up to kSmallBatchTargets weights of one dtype and width (Q, K, V): one launch at small n.
  void gemm_multi(const exec::Buffer& x, std::span<const exec::GemmTarget> targets, int n) override {
    const CudaWeight* first = targets.empty() ? nullptr : &weight_of(*targets.front().w);
    bool together = first && targets.size() <= size_t(kSmallBatchTargets);
    for (const exec::GemmTarget& t : targets) {
      const CudaWeight& cw = weight_of(*t.w);
      together = together && small_batch(cw, x, n) && cw.dtype == first->dtype && cw.cols == first->cols;
    }
    const float* xp = x.data();
    if (!together) {
      if (first && n > 0 && same_input(targets) && !small_batch(*first, x, n)) {  // cuBLAS: x rounded once for all
        struct Output {
          const CudaWeight* w;
          const float* bias;
          float* y;
        };
        std::vector<Output> outputs;
        void* room = rounding_room(*first, n);
        graphs_->note(kMultiTag, xp, room, n);
        for (const exec::GemmTarget& t : targets) {
          outputs.push_back({&weight_of(*t.w), t.bias && !t.bias->empty() ? t.bias->data() : nullptr, t.y->data()});
          graphs_->note(outputs.back().w->data, outputs.back().bias, outputs.back().y);
        }
        graphs_->run([=, this, outputs = std::move(outputs)] {
          KernelTimed timed(times_, "gemm (cuBLAS)", stream_);
          const void* b = rounded(xp, room, *first, n);
          for (const Output& o : outputs) {
            product_of(b, *o.w, o.y, n, false);
            if (o.bias) launch_add_bias(o.y, o.bias, n, static_cast<int>(o.w->rows), stream_);
          }
        });
        return;
      }
      for (const exec::GemmTarget& t : targets) gemm(x, *t.w, t.bias, *t.y, n);
      return;
    }
    SmallBatchTargets all;
    for (const exec::GemmTarget& t : targets) {
      add_target(all, weight_of(*t.w), t.bias && !t.bias->empty() ? t.bias->data() : nullptr, t.y->data());
      graphs_->note(kMultiTag, all.w[all.count - 1], all.bias[all.count - 1], all.y[all.count - 1]);
    }
    graphs_->note(xp, n);
    graphs_->run([=, this] {
      KernelTimed timed(times_, "gemm_multi (small batch)", stream_);
      launch_small_batch_gemm(all, first->dtype, xp, n, static_cast<int>(first->cols), stream_, early_launch_on_);
    });
  }
  void gemm_glu(const exec::Buffer& x, const exec::Weight& gate_up, int64_t ff, exec::Buffer& y, int n) override {
    const CudaWeight* w = &weight_of(gate_up);
    ACTORD_CHECK(w->rows == 2 * ff);
    const bool small = small_batch(*w, x, n);
    const float* xp = x.data();
    float* yp = y.data();
    if (small) {  // gate and up rows of a feature in one warp, silu(gate) * up written directly
      graphs_->note(kGluTag, w->data, xp, yp, n, ff);
      graphs_->run([=, this] {
        KernelTimed timed(times_, "gemm_glu (small batch)", stream_);
        launch_small_batch_glu(w->data, w->dtype, xp, n, static_cast<int>(ff), static_cast<int>(w->cols), yp,
                               stream_, early_launch_on_);
      });
      return;
    }
    reserve(glu_scratch_, size_t(n) * size_t(w->rows));
    float* gate_up_rows = glu_scratch_.data();
    void* room = rounding_room(*w, n);
    graphs_->note(kGluTag, w->data, xp, yp, n, ff, gate_up_rows, room);
    graphs_->run([=, this] {
      KernelTimed timed(times_, "gemm_glu (cuBLAS)", stream_);
      cublas_product(xp, room, *w, gate_up_rows, n, false);
      launch_silu_mul_halves(gate_up_rows, yp, n, ff, stream_);
    });
  }
  void gated_activation(exec::GatedActivation act, exec::Buffer& gate, const exec::Buffer& up, size_t count) override {
    const int code = act == exec::GatedActivation::silu ? 0 : act == exec::GatedActivation::gelu_tanh ? 1 : 2;
    float* gp = gate.data();
    const float* up_p = up.data();
    graphs_->note(kActivationTag, code, gp, up_p, count);
    graphs_->run([=, this] {
      KernelTimed timed(times_, "gated_activation", stream_);
      launch_gated_activation(code, gp, up_p, count, stream_);
    });
  }
  void add(exec::Buffer& x, const exec::Buffer& y, size_t count) override {
    float* xp = x.data();
    const float* yp = y.data();
    graphs_->note(kAddTag, xp, yp, count);
    graphs_->run([=, this] {
      KernelTimed timed(times_, "add", stream_);
      launch_add(xp, yp, count, stream_);
    });
  }
  void scale(exec::Buffer& x, float factor, size_t count) override {
    queue_in_place(kScaleTag, "scale", &launch_scale, x, factor, count);
  }
  void softcap(exec::Buffer& x, float cap, size_t count) override {
    queue_in_place(kSoftcapTag, "softcap", &launch_softcap, x, cap, count);
  }
  void rope_and_store_kv(const ForwardBatch& batch, exec::Buffer& q, exec::Buffer& k, const exec::Buffer& v,
                         const exec::AttentionShape& shape, const exec::Buffer& inv_freq,
                         const exec::KvLayer& kv) override {
    upload_tables(batch, kv.block_size);
    float *qp = q.data(), *kp = k.data();
    const float *vp = v.data(), *freq = inv_freq.data();
    const KvView cache = view(kv);
    note_attention(kRopeTag, shape, cache);
    const int rotary = shape.rotary();
    const float rotary_scale = shape.rotary_scale;
    graphs_->note(qp, kp, vp, freq, rotary, rotary_scale);
    graphs_->run([=, this, step = step_] {
      KernelTimed timed(times_, "rope_and_store_kv", stream_);
      launch_rope_store_kv(step, qp, kp, vp, shape.n_heads, shape.n_kv_heads, shape.head_dim, rotary, rotary_scale,
                           freq, cache, stream_);
    });
  }
  void paged_attention(const ForwardBatch& batch, const exec::Buffer& q, exec::Buffer& out,
                       const exec::AttentionShape& shape, const exec::KvLayer& kv) override {
    heads_ = shape.n_heads;  // for the next steps' plans
    upload_tables(batch, kv.block_size);
    const bool tiled = tiles_on_ && step_.n_tiles > 0 && prefill_attention_fits(shape.head_dim);
    const bool split = step_.n_splits > 0 && split_decode_path_.on;
    const bool check_split = split && !split_decode_path_.checked;
    if (tiled || check_split) {  // prefill tiles are not graphed; a check reads results on the host
      spoil_and_flush();
    }
    if (tiled) {
      KernelTimed timed(times_, "attention (prefill tiles)", stream_);
      const bool long_path = !plan_.long_seqs.empty() && (flash_fits(shape, kv) || cublas_long_fits(shape, kv));
      StepLayout short_tiles = step_;
      if (long_path) short_tiles.n_tiles = plan_.short_tiles;  // the long sequences' tiles come last
      launch_prefill_attention(short_tiles, q.data(), out.data(), shape.n_heads, shape.n_kv_heads, shape.head_dim,
                               shape.sliding_window, view(kv), stream_);
      if (long_path) {
        for (const AttentionPlan::LongSeq& ls : plan_.long_seqs) attend_long(ls, q, out, shape, kv);
      }
    }
    if (split) reserve(split_partial_, size_t(step_.n_splits) * size_t(shape.n_heads) * size_t(shape.head_dim + 2));
    const bool per_query = (tiled ? plan_.tiled_tokens : 0) + (split ? plan_.split_tokens : 0) < step_.n;
    const int skip = (tiled ? AttentionPlan::kTiled : 0) | (split ? AttentionPlan::kSplit : 0);
    const float* qp = q.data();
    float* op = out.data();
    float* partial = split ? split_partial_.data() : nullptr;
    const KvView cache = view(kv);
    note_attention(kAttentionTag, shape, cache);
    graphs_->note(qp, op, partial, per_query, skip);
    graphs_->run([=, this, step = step_] {
      KernelTimed timed(times_, split ? "attention (split decodes)" : "attention (per query)", stream_);
      if (split) {
        launch_split_attention(step, qp, partial, op, shape.n_heads, shape.n_kv_heads, shape.head_dim,
                               shape.sliding_window, cache, stream_);
      }
      if (per_query) {
        launch_paged_attention(step, qp, op, shape.n_heads, shape.n_kv_heads, shape.head_dim, shape.sliding_window,
                               cache, skip, stream_);
      }
    });
    if (check_split) check_split_decode(q, out, shape, kv, tiled);
  }
  // An attention launch's shape and cache in the step's signature.
  // An elementwise primitive x[i] = f(x[i], value), i < count: noted for the step graphs under `tag`, launched (timed
  // as `name`) by `launch`.
  void queue_in_place(uint32_t tag, const char* name, void (*launch)(float*, float, size_t, cudaStream_t),
                      exec::Buffer& x, float value, size_t count) {
    float* xp = x.data();
    graphs_->note(tag, xp, value, count);
    graphs_->run([=, this] {
      KernelTimed timed(times_, name, stream_);
      launch(xp, value, count, stream_);
    });
  }
  void note_attention(uint32_t tag, const exec::AttentionShape& shape, const KvView& cache) {
    graphs_->note(tag, shape.n_heads, shape.n_kv_heads, shape.head_dim, shape.sliding_window, cache.k_base,
                  cache.v_base, static_cast<int>(cache.dtype), cache.block_size, cache.block_stride,
                  cache.head_stride);
  }
  // The first split-K step of a backend is checked against the per-query kernel on the same tokens (a copy of out
  // with every untiled token redone one warp per query): a mismatch keeps that result and turns split-K off.
  void check_split_decode(const exec::Buffer& q, exec::Buffer& out, const exec::AttentionShape& shape,
                          const exec::KvLayer& kv, bool tiled) {
    const int width = shape.n_heads * shape.head_dim;
    const size_t count = size_t(step_.n) * size_t(width);
    reserve(check_scratch_, count);
    ACTORD_CUDA_CHECK(cudaMemcpyAsync(check_scratch_.data(), out.data(), count * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream_));
    launch_paged_attention(step_, q.data(), check_scratch_.data(), shape.n_heads, shape.n_kv_heads, shape.head_dim,
                           shape.sliding_window, view(kv), tiled ? AttentionPlan::kTiled : 0, stream_);
    float diff[2] = {0, 0};
    max_difference(out.data(), check_scratch_.data(), 0, step_.n, width, diff, stream_);
    if (split_decode_path_.judge(diff, kSplitDecodeTolerance, "split-K decode attention", "one warp per query",
                                 device_)) {
      return;
    }
    ACTORD_CUDA_CHECK(cudaMemcpyAsync(out.data(), check_scratch_.data(), count * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream_));
  }
  void gather_rows(const exec::Buffer& src, std::span<const int32_t> rows, int dim, exec::Buffer& dst) override {
    const int32_t* idx = upload_indices(rows, {});
    const float* from = src.data();
    float* to = dst.data();
    const int count = static_cast<int>(rows.size());
    graphs_->note(kGatherTag, from, idx, count, dim, to);
    graphs_->run([=, this] {
      KernelTimed timed(times_, "gather_rows", stream_);
      launch_gather_rows(from, idx, count, dim, to, stream_);
    });
  }
  void scatter_add_rows(const exec::Buffer& src, std::span<const int32_t> rows, std::span<const float> weights,
                        int dim, exec::Buffer& dst) override {
    ACTORD_CHECK(rows.size() == weights.size());
    const int32_t* idx = upload_indices(rows, weights);
    const auto* w = reinterpret_cast<const float*>(idx + rows.size());
    const float* from = src.data();
    float* to = dst.data();
    const int count = static_cast<int>(rows.size());
    graphs_->note(kScatterTag, from, idx, count, dim, to);
    graphs_->run([=, this] {
      KernelTimed timed(times_, "scatter_add_rows", stream_);
      launch_scatter_add_rows(from, idx, w, count, dim, to, stream_);
    });
  }
  void copy_columns(const exec::Buffer& src, size_t src_offset, int rows, int width, exec::Buffer& dst,
                    int dst_stride, int col_offset) override {
    const float* from = src.data() + src_offset;
    float* to = dst.data();
    graphs_->note(kCopyTag, from, to, rows, width, dst_stride, col_offset);
    graphs_->run([=, this] {
      KernelTimed timed(times_, "copy_columns", stream_);
      launch_copy_columns(from, rows, width, to, dst_stride, col_offset, stream_);
    });
  }
  void zero(exec::Buffer& b, size_t count) override {
    float* p = b.data();
    graphs_->note(kZeroTag, p, count);
    graphs_->run([=, this] {
      KernelTimed timed(times_, "zero", stream_);
      ACTORD_CUDA_CHECK(cudaMemsetAsync(p, 0, count * sizeof(float), stream_));
    });
  }
  void row_bests(const exec::Buffer& x, int rows, int width, int32_t first_id, std::span<RowBest> out) override {
    ACTORD_CHECK(out.size() >= size_t(std::max(rows, 0)));
    flush_queue({x.data(), size_t(std::max(rows, 0)) * size_t(width)});
    if (rows <= 0) return;
    KernelTimed timed(times_, "row_bests + download", stream_);
    const size_t bytes = size_t(rows) * sizeof(RowBest);
    reserve_bytes(bests_, bests_bytes_, bytes * size_t(1 + row_best_chunks(width)));
    auto* bests = static_cast<RowBest*>(bests_.get());  // rows' results, then their chunks'
    if (picks_->active()) {  // defer_reads(): kept on the device for the next step, on the host at complete_reads
      launch_row_bests(x.data(), rows, width, first_id, bests + rows, picks_->next_rows(rows), stream_);
      picks_->queue_copy(out.first(size_t(rows)));
      return;
    }
    launch_row_bests(x.data(), rows, width, first_id, bests + rows, bests, stream_);
    ACTORD_CUDA_CHECK(cudaMemcpyAsync(out.data(), bests, bytes, cudaMemcpyDeviceToHost, stream_));
    ACTORD_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // The rows sampled on the GPU (device_row_sampler.hpp), those it leaves over the worker's pool. While deferring:
  // drawn on the GPU only, the tokens left in the step's picks, `out` written at complete_reads.
  bool sample_rows(exec::Buffer& logits, int rows, int vocab, std::span<const SampleRequest> requests,
                   std::span<SampledToken> out) override {
    if (!row_sampler_->on() || rows <= 0 || requests.size() != size_t(rows) || out.size() != size_t(rows))
      return false;
    if (picks_->active() && !row_sampler_->draws_all(requests, vocab)) return false;
    flush_queue({logits.data(), size_t(rows) * size_t(vocab)});
    KernelTimed timed(times_, "sample_rows", stream_);
    if (picks_->active()) {
      const int32_t* tokens = row_sampler_->sample_deferred(logits.data(), rows, vocab, requests);
      launch_tokens_to_picks(tokens, rows, picks_->next_rows(rows), stream_);
      picks_->queue_copy(out);
      return true;
    }
    row_sampler_->sample(logits.data(), rows, vocab, requests, out);
    return true;
  }

  bool computes_in_host_memory() const override { return false; }
  // Prefill pieces of up to 4,096 tokens: cuBLAS nears the device's matrix rate only from thousands of rows (the
  // 8B shape's prefill products through PyTorch on an H200: 740-800 TFLOP/s at 4,096 rows). Activations of a
  // piece: ~0.5 GB at an ffn of 14,336.
  int forward_piece_tokens() const override { return 4096; }

  bool runs_ahead() const override { return run_ahead_on_; }
  bool samples_ahead(std::span<const SampleRequest> requests, int vocab) override {
    return run_ahead_on_ && row_sampler_->draws_all(requests, vocab);
  }
  uint64_t defer_reads() override { return picks_->begin(); }
  bool reads_done(uint64_t ticket) override { return picks_->done(ticket); }
  void complete_reads(uint64_t ticket) override { picks_->complete(ticket); }

 protected:
  // A buffer grows: the launches queued so far (which may read the memory it gives up) run first.
  Allocation allocate(size_t n) override {
    spoil_and_flush();
    std::shared_ptr<void> memory = device_memory(n * sizeof(float));
    auto* data = static_cast<float*>(memory.get());
    return {data, std::move(memory)};
  }
  void upload_into(std::span<const float> host, exec::Buffer& b) override {
    flush_queue();
    ACTORD_CUDA_CHECK(cudaMemcpyAsync(b.data(), host.data(), host.size_bytes(), cudaMemcpyHostToDevice, stream_));
    ACTORD_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  // The matrices' rows one after the other, contiguous, in their dtype.
  Result<exec::Weight> upload_rows(std::initializer_list<const exec::HostMatrix*> parts, int64_t weight_rows) {
    auto w = std::make_shared<CudaWeight>();
    const exec::HostMatrix& first = **parts.begin();
    w->dtype = first.dtype;
    w->cols = first.cols;
    for (const exec::HostMatrix* m : parts) w->rows += m->rows;
    const size_t esize = dtype_size(w->dtype);
    const size_t row_bytes = size_t(w->cols) * esize;
    if (cudaMalloc(&w->data, size_t(w->rows) * row_bytes) != cudaSuccess) {
      cudaGetLastError();
      return make_error(Errc::out_of_memory, "cuda:" + std::to_string(device_) + ": no room for a [" +
                                                 std::to_string(w->rows) + ", " + std::to_string(w->cols) + "] matrix");
    }
    auto* dst = static_cast<unsigned char*>(w->data);
    for (const exec::HostMatrix* m : parts) {
      const size_t stride = size_t(m->row_stride ? m->row_stride : m->cols) * esize;
      ACTORD_CUDA_CHECK(cudaMemcpy2D(dst, row_bytes, m->data, stride, row_bytes, size_t(m->rows), cudaMemcpyHostToDevice));
      dst += size_t(m->rows) * row_bytes;
    }
    exec::Weight out;
    out.rows = weight_rows;
    out.cols = w->cols;
    out.dtype = w->dtype;
    out.impl = std::move(w);
    return out;
  }

  // Whether every target's weight has the first's dtype and width (one rounded x serves them all).
  static bool same_input(std::span<const exec::GemmTarget> targets) {
    const CudaWeight& first = weight_of(*targets.front().w);
    for (const exec::GemmTarget& t : targets) {
      const CudaWeight& cw = weight_of(*t.w);
      if (cw.dtype != first.dtype || cw.cols != first.cols) return false;
    }
    return true;
  }
  // Whether the weight-streaming kernel takes x [n, w.cols] times w: 16-bit weights, up to kSmallBatchRows rows, x
  // 16-byte aligned (it reads x 16 bytes at a time; its rows then are too, as k % 8 is 0).
  bool small_batch(const CudaWeight& w, const exec::Buffer& x, int n) const {
    return small_batch_on_ && small_batch_gemm_fits(w.dtype, n, static_cast<int>(w.cols)) &&
           reinterpret_cast<uintptr_t>(x.data()) % 16 == 0;
  }

  // Room for x [n, w.cols] rounded to w's 16-bit type (rounded_, shared by every product of a step: each launch
  // fills it before its product reads it), taken when the primitive is called; null for f32 weights.
  void* rounding_room(const CudaWeight& w, int n) {
    if (w.dtype == DType::f32) return nullptr;
    grow_bytes(rounded_, rounded_bytes_, size_t(n) * size_t(w.cols) * dtype_size(w.dtype));
    return rounded_.get();
  }
  // x rounded into room (launched) where there is one, else x: what a product with w takes.
  const void* rounded(const float* x, void* room, const CudaWeight& w, int n) {
    if (!room) return x;
    launch_round_to(x, room, w.dtype, size_t(n) * size_t(w.cols), stream_);
    return room;
  }
  // y [n, w.rows] (+)= x [n, w.cols] w^T by cuBLAS, x rounded into room first (rounding_room). Row-major y = x W^T
  // is column-major y^T = W x^T: cuBLAS computes C (rows x n) = op(A) B with A = W stored column-major as [cols,
  // rows] (transposed) and B = x as [cols, n]. accumulate: y += x W^T (cuBLAS's beta = 1).
  void cublas_product(const float* x, void* room, const CudaWeight& w, float* y, int n, bool accumulate) {
    if (n == 0) return;
    product_of(rounded(x, room, w, n), w, y, n, accumulate);
  }
  // Device scratch that must grow: the launches queued so far (which may read the block it gives up) run first.
  void grow_bytes(std::shared_ptr<void>& memory, size_t& have, size_t bytes) {
    if (have >= bytes) return;
    spoil_and_flush();
    reserve_bytes(memory, have, bytes);
  }
  // y (+)= b w^T, b [n, w.cols] as rounded() gives it.
  void product_of(const void* b, const CudaWeight& w, float* y, int n, bool accumulate) {
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    const int m = static_cast<int>(w.rows), k = static_cast<int>(w.cols);
    ACTORD_CUBLAS_CHECK(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, w.data, cuda_type(w.dtype), k, b,
                                     cuda_type(w.dtype), k, &beta, y, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT));
  }

  bool flash_fits(const exec::AttentionShape& shape, const exec::KvLayer& kv) const {
    return flash_prefill_path_.on &&
           flash_prefill_fits(kv.dtype, shape.head_dim, shape.n_heads, shape.n_kv_heads, view(kv));
  }
  bool cublas_long_fits(const exec::AttentionShape& shape, const exec::KvLayer& kv) const {
    return long_prefill_path_.on && LongPrefillAttention::fits(kv.dtype, shape.head_dim);
  }
  // A long prefill sequence's attention on the tensor cores: the flash kernel where it fits and is on, else the
  // cuBLAS path, else the FMA tiles; each tensor-core path's first use checked against the tiles.
  void attend_long(const AttentionPlan::LongSeq& ls, const exec::Buffer& q, exec::Buffer& out,
                   const exec::AttentionShape& shape, const exec::KvLayer& kv) {
    if (flash_fits(shape, kv)) {
      launch_flash_prefill(step_, ls.first_tile, ls.tile_count, q.data(), out.data(), shape.n_heads,
                           shape.n_kv_heads, shape.head_dim, shape.sliding_window, view(kv), stream_);
      if (!flash_prefill_path_.checked) {
        check_against_tiles(ls, q, out, shape, kv, flash_prefill_path_, "flash prefill attention");
      }
    } else if (cublas_long_fits(shape, kv)) {
      long_prefill_.run(blas_, stream_, step_, ls.seq, ls.first_token, ls.count, ls.start_pos, q.data(), out.data(),
                        shape.n_heads, shape.n_kv_heads, shape.head_dim, shape.sliding_window, view(kv));
      if (!long_prefill_path_.checked) {
        check_against_tiles(ls, q, out, shape, kv, long_prefill_path_, "long prefill attention");
      }
    } else {
      launch_prefill_attention(tiles_of(ls), q.data(), out.data(), shape.n_heads, shape.n_kv_heads, shape.head_dim,
                               shape.sliding_window, view(kv), stream_);
    }
  }
  StepLayout tiles_of(const AttentionPlan::LongSeq& ls) const {
    StepLayout its_tiles = step_;
    its_tiles.tiles = step_.tiles + 3 * ls.first_tile;
    its_tiles.n_tiles = ls.tile_count;
    return its_tiles;
  }
  // The first use of a tensor-core path for long prefills is checked against the FMA tiles on the same sequence
  // (into scratch): where they differ by more than bf16 rounding explains, the tiles' result is kept and the path is
  // turned off for this backend, with a message (a wrong tensor-core path costs speed, never tokens).
  void check_against_tiles(const AttentionPlan::LongSeq& ls, const exec::Buffer& q, exec::Buffer& out,
                           const exec::AttentionShape& shape, const exec::KvLayer& kv, CheckedPath& path,
                           const char* what) {
    const int width = shape.n_heads * shape.head_dim;
    reserve(check_scratch_, size_t(step_.n) * size_t(width));
    launch_prefill_attention(tiles_of(ls), q.data(), check_scratch_.data(), shape.n_heads, shape.n_kv_heads,
                             shape.head_dim, shape.sliding_window, view(kv), stream_);
    float diff[2] = {0, 0};
    max_difference(out.data(), check_scratch_.data(), ls.first_token, ls.count, width, diff, stream_);
    if (path.judge(diff, kLongPrefillTolerance, what, "the FMA tiles", device_)) return;
    launch_copy_columns(check_scratch_.data() + size_t(ls.first_token) * width, ls.count, width,
                        out.data() + size_t(ls.first_token) * width, width, 0, stream_);
  }

  // Every sequence's block table (whole blocks of block_size up to its last position), once per step.
  void upload_tables(const ForwardBatch& batch, int block_size) {
    ACTORD_CHECK(&batch == batch_);
    if (tables_block_size_ == block_size) return;
    host_tables_.clear();
    host_seq_table_.clear();
    for (const SeqSlice& s : batch.seqs) {
      host_seq_table_.push_back(static_cast<int32_t>(host_tables_.size()));
      const int blocks = (s.start_pos + s.num_tokens + block_size - 1) / block_size;
      host_tables_.insert(host_tables_.end(), s.block_table, s.block_table + blocks);
    }
    const size_t table_bytes = host_tables_.size() * sizeof(uint32_t);
    const size_t offsets_bytes = host_seq_table_.size() * sizeof(int32_t);
    grow_bytes(tables_, tables_bytes_, table_bytes + offsets_bytes);
    auto* base = static_cast<unsigned char*>(tables_.get());
    ACTORD_CUDA_CHECK(cudaMemcpyAsync(base, host_seq_table_.data(), offsets_bytes, cudaMemcpyHostToDevice, stream_));
    ACTORD_CUDA_CHECK(
        cudaMemcpyAsync(base + offsets_bytes, host_tables_.data(), table_bytes, cudaMemcpyHostToDevice, stream_));
    step_.seq_table = reinterpret_cast<const int32_t*>(base);
    step_.tables = reinterpret_cast<const uint32_t*>(base + offsets_bytes);
    tables_block_size_ = block_size;
    graphs_->note(kTablesTag, step_.seq_table, step_.tables);
  }

  // rows, then weights (as raw floats), in device scratch (indices_). Launch by launch, every call uses its start:
  // the copy is queued on the stream after the kernels that read the previous contents (and a pageable source is
  // staged before this returns). While a step's launches are queued, each call's words go at their own place in
  // queued_indices_, copied to indices_ before the chunk that reads them is launched (upload_queued_indices): a
  // graph's launches read them at the same places every step, and the step's check reads them again.
  const int32_t* upload_indices(std::span<const int32_t> rows, std::span<const float> weights) {
    const size_t words = rows.size() + weights.size();
    const size_t at = queued_indices_.size();
    auto put = [&](std::vector<int32_t>& host, size_t at) {  // rows, then the weights' bits, from host[at]
      host.resize(at + words);
      std::memcpy(host.data() + at, rows.data(), rows.size_bytes());
      if (!weights.empty()) std::memcpy(host.data() + at + rows.size(), weights.data(), weights.size_bytes());
    };
    if (graphs_->queuing() && (at + words) * sizeof(int32_t) <= indices_bytes_) {
      put(queued_indices_, at);
      return static_cast<const int32_t*>(indices_.get()) + at;
    }
    if (graphs_->queuing()) spoil_and_flush();  // the block must grow: what is queued runs first, with its words
    put(host_indices_, 0);
    reserve_bytes(indices_, indices_bytes_, words * sizeof(int32_t));
    ACTORD_CUDA_CHECK(cudaMemcpyAsync(indices_.get(), host_indices_.data(), words * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, stream_));
    return static_cast<const int32_t*>(indices_.get());
  }
  // The queued rows and weights not on the device yet, copied (StepGraphs calls it before launching a chunk).
  void upload_queued_indices() {
    const size_t from = indices_uploaded_, words = queued_indices_.size() - from;
    if (words == 0) return;
    ACTORD_CUDA_CHECK(cudaMemcpyAsync(static_cast<int32_t*>(indices_.get()) + from, queued_indices_.data() + from,
                                      words * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    indices_uploaded_ = queued_indices_.size();
  }
  // Launches what is queued and ends the step's segment (StepGraphs::flush).
  void flush_queue(StepGraphs::Check check = {}) {
    graphs_->flush(check);
    queued_indices_.clear();
    indices_uploaded_ = 0;
  }
  // The queued launches run one by one now, the step kept out of graphs (memory they read is about to change, or a
  // check is about to read results on the host).
  void spoil_and_flush() {
    graphs_->spoil();
    flush_queue();
  }

  static KvView view(const exec::KvLayer& kv) {
    return KvView{kv.k_base, kv.v_base, kv.dtype, kv.block_size, kv.block_stride, kv.head_stride};
  }

  // Each primitive's first value in a step's signature (StepGraphs::note).
  enum : uint32_t {
    kStepTag = 0x57e9,
    kTablesTag,
    kEmbedTag,
    kNormTag,
    kProductTag,
    kMultiTag,
    kGluTag,
    kActivationTag,
    kAddTag,
    kScaleTag,
    kSoftcapTag,
    kRopeTag,
    kAttentionTag,
    kCopyTag,
    kZeroTag,
    kGatherTag,
    kScatterTag
  };
  static constexpr size_t kBlasWorkspaceBytes = size_t(32) << 20;

  int device_;
  cpu::ThreadPool* pool_ = nullptr;         // host work: rows sampled on the host
  std::unique_ptr<cpu::ThreadPool> own_pool_;  // where make_backend was given none
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::shared_ptr<void> blas_workspace_;
  std::unique_ptr<StepGraphs> graphs_;
  const ForwardBatch* batch_ = nullptr;  // the batch of begin_step
  StepLayout step_;
  int tables_block_size_ = 0;            // the block size step_'s tables were uploaded for (0: not yet)
  AttentionPlan plan_;                       // how this step's attention is divided among the kernels
  int multiprocessors_ = 1;                  // the device's SMs
  int heads_ = 32;                           // query heads of the last attention (the next plan's warps per split)
  static constexpr int kSplitWarpsPerSm = 16;  // split decodes' warps per SM (their ~128 registers a thread fit 16)
  exec::Buffer split_partial_;               // launch_split_attention's partial results
  // ACTORD_CUDA_DISABLE can turn these off.
  bool small_batch_on_ = true, tiles_on_ = true, run_ahead_on_ = true, early_launch_on_ = false;
  CheckedPath split_decode_path_, long_prefill_path_, flash_prefill_path_;
  std::unique_ptr<DeviceRowSampler> row_sampler_;
  std::unique_ptr<DeferredPicks> picks_;     // a deferred step's greedy picks or drawn tokens (defer_reads)
  static constexpr float kSplitDecodeTolerance = 1e-4f;  // f32 sums in another order
  static constexpr float kLongPrefillTolerance = 3e-2f;  // bf16 Q and P against f32 (outputs are averages of V)
  exec::Buffer check_scratch_;           // a fallback's result at a CheckedPath's first use
  KernelTimes times_;                    // ACTORD_CUDA_PROFILE=1: GPU time per primitive
  LongPrefillAttention long_prefill_;
  std::vector<int32_t> host_seq_table_, host_indices_, queued_indices_;
  size_t indices_uploaded_ = 0;  // queued_indices_ on the device so far
  std::vector<uint32_t> host_tables_;
  // Device scratch, grown as needed (freeing a buffer waits for the kernels that read it: cudaFree synchronizes).
  std::shared_ptr<void> meta_, tables_, rounded_, indices_, bests_;
  size_t meta_bytes_ = 0, tables_bytes_ = 0, rounded_bytes_ = 0, indices_bytes_ = 0, bests_bytes_ = 0;
  exec::Buffer glu_scratch_;
};

}  // namespace

bool built_with_cuda() { return true; }

int device_of(const exec::Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  return cuda ? cuda->device() : -1;
}

void* stream_of(const exec::Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  return cuda ? static_cast<void*>(cuda->stream()) : nullptr;
}

std::vector<std::string> path_names() {
  return {"small_batch", "prefill_tiles", "long_prefill", "flash_prefill", "split_decode", "device_sampling",
          "step_graphs", "run_ahead", "early_launch"};
}

namespace {
// A checked path's state in a backend make_backend() made; "unused" for any other backend.
std::string state_of(const exec::Backend& backend, const std::string& (CudaBackend::*state)() const) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  return cuda ? (cuda->*state)() : "unused";
}
}  // namespace

std::string long_prefill_state(const exec::Backend& b) { return state_of(b, &CudaBackend::long_prefill_state); }
std::string split_decode_state(const exec::Backend& b) { return state_of(b, &CudaBackend::split_decode_state); }
std::string flash_prefill_state(const exec::Backend& b) { return state_of(b, &CudaBackend::flash_prefill_state); }
std::string device_sampling_state(const exec::Backend& b) { return state_of(b, &CudaBackend::device_sampling_state); }

StepGraphStats step_graph_stats(const exec::Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  if (!cuda) return {};
  const StepGraphs& graphs = cuda->graphs();
  return {graphs.state(), graphs.replays(), graphs.captures(), graphs.eager_chunks()};
}

void without_step_graphs(exec::Backend& backend, const std::string& why) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (cuda) cuda->graphs().disable("off: " + why);
}

Result<std::unique_ptr<exec::Backend>> make_backend(int device, cpu::ThreadPool* pool) {
  const int n = device_count();
  if (n == 0) return make_error(Errc::unsupported, "device: cuda: " + unavailable_reason());
  if (device < 0 || device >= n) {
    return make_error(Errc::invalid_argument, "device: cuda:" + std::to_string(device) + " does not exist (" +
                                                  std::to_string(n) + " device(s))");
  }
  return std::unique_ptr<exec::Backend>(new CudaBackend(device, pool));
}

}  // namespace actord::cuda
