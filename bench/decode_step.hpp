// A decode step's products of the ~134M Llama (hidden 768, ffn 2048, vocab 32000, 12 layers), as the model runs
// them: q/k/v as one multi-output product, o, gate and up as one fused gated product (gemm_nt_glu), down, then
// lm_head; every matrix its own copy so that the weights stream from DRAM as in serving; how each matrix is stored
// is the caller's (bf16 blocked, quantized, ...). Shared by the benches.
#pragma once

#include <functional>
#include <random>
#include <vector>

#include "core/dtype.hpp"
#include "executors/cpu/blocked_weights.hpp"
#include "executors/cpu/gemm.hpp"
#include "executors/cpu/thread_pool.hpp"

namespace actord::bench {

// A row-major [n, k] bf16 matrix of values drawn from `dist` (the benches' random weights).
inline std::vector<unsigned char> random_bf16(int n, int k, std::mt19937& rng, std::normal_distribution<float>& dist) {
  std::vector<float> w32(size_t(n) * size_t(k));
  for (float& v : w32) v = dist(rng);
  std::vector<unsigned char> raw(w32.size() * 2);
  convert_from_f32(DType::bf16, w32.data(), raw.data(), w32.size());
  return raw;
}

class DecodeStep {
 public:
  static constexpr int kLayers = 12, kHidden = 768, kFfn = 2048, kVocab = 32000;

  // make(n, k) stores one [n, k] matrix and returns its view; make_glu(ff, k) a gate and an up projection [ff, k]
  // fused for gemm_nt_glu (the storage is the caller's and outlives this).
  DecodeStep(const std::function<cpu::WeightMatrix(int n, int k)>& make,
             const std::function<cpu::WeightMatrix(int ff, int k)>& make_glu) {
    for (int l = 0; l < kLayers; ++l) {
      layers_.push_back({make(kHidden, kHidden), make(kHidden, kHidden), make(kHidden, kHidden),
                         make(kHidden, kHidden), make_glu(kFfn, kHidden), make(kHidden, kFfn)});
    }
    lm_head_ = make(kVocab, kHidden);
  }

  // Multiply-adds of one step of m rows.
  static double macs(int m) {
    return double(m) * (kLayers * (4.0 * kHidden * kHidden + 3.0 * kFfn * kHidden) + double(kVocab) * kHidden);
  }

  // One step's products for m rows of activations (0.5 everywhere), on the pool with `path`.
  void run(int m, cpu::ThreadPool& pool, cpu::GemmPath path = {}) {
    x_.assign(size_t(m) * kFfn, 0.5f);
    a_.resize(size_t(m) * kFfn);
    b_.resize(size_t(m) * kFfn);
    c_.resize(size_t(m) * kHidden);
    logits_.resize(size_t(m) * kVocab);
    for (const Layer& L : layers_) {
      const cpu::GemmOutput qkv[] = {{&L.q, nullptr, a_.data()}, {&L.k, nullptr, b_.data()}, {&L.v, nullptr, c_.data()}};
      cpu::gemm_nt_multi(x_.data(), qkv, 3, m, pool, path);
      cpu::gemm_nt(a_.data(), L.o, nullptr, c_.data(), m, pool, path);
      cpu::gemm_nt_glu(c_.data(), L.gate_up, kFfn, a_.data(), m, pool, path.isa);
      cpu::gemm_nt(a_.data(), L.down, nullptr, c_.data(), m, pool, path);
    }
    cpu::gemm_nt(c_.data(), lm_head_, nullptr, logits_.data(), m, pool, path);
  }

 private:
  struct Layer {
    cpu::WeightMatrix q, k, v, o, gate_up, down;
  };
  std::vector<Layer> layers_;
  cpu::WeightMatrix lm_head_;
  std::vector<float> x_, a_, b_, c_, logits_;
};

}  // namespace actord::bench
