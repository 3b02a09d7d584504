// Parity of every CPU kernel against its double-precision reference, on random inputs of several shapes.
#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "executors/cpu/kernels.hpp"
#include "executors/cpu/reference_kernels.hpp"

using namespace actord;

namespace {

std::vector<float> random_vector(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

void require_close(const std::vector<float>& a, const std::vector<float>& b, float rel = 1e-5f) {
  REQUIRE(a.size() == b.size());
  float max_ref = 0;
  for (float x : b) max_ref = std::max(max_ref, std::abs(x));
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("index " << i << ": " << a[i] << " vs " << b[i]);
    REQUIRE(std::abs(a[i] - b[i]) <= rel * std::max(1.0f, max_ref));
  }
}

}  // namespace

TEST_CASE("matmul_nt matches the reference", "[kernels]") {
  std::mt19937 rng(1);
  for (auto [m, n, k] : {std::tuple{1, 1, 1}, {3, 7, 5}, {16, 64, 172}, {5, 512, 64}}) {
    auto x = random_vector(size_t(m) * k, rng), w = random_vector(size_t(n) * k, rng);
    std::vector<float> y(size_t(m) * n), ref(size_t(m) * n);
    cpu::matmul_nt(x.data(), w.data(), y.data(), m, n, k);
    cpu::reference::matmul_nt(x.data(), w.data(), ref.data(), m, n, k);
    require_close(y, ref);
  }
}

TEST_CASE("rms_norm - rope and silu_mul match the reference", "[kernels]") {
  std::mt19937 rng(2);
  for (int dim : {8, 64, 130}) {
    auto x = random_vector(size_t(3) * dim, rng), w = random_vector(dim, rng);
    std::vector<float> y(x.size()), ref(x.size());
    cpu::rms_norm(x.data(), w.data(), y.data(), 3, dim, 1e-5f);
    cpu::reference::rms_norm(x.data(), w.data(), ref.data(), 3, dim, 1e-5f);
    require_close(y, ref);
  }
  for (int head_dim : {2, 8, 64, 128}) {
    for (int pos : {0, 1, 17, 511}) {
      auto x = random_vector(size_t(4) * head_dim, rng), ref = x;
      cpu::rope_rotate_half(x.data(), 4, head_dim, pos, 10000.0f);
      cpu::reference::rope_rotate_half(ref.data(), 4, head_dim, pos, 10000.0f);
      require_close(x, ref, 1e-4f);
    }
  }
  auto g = random_vector(100, rng, 4.0f), u = random_vector(100, rng), gref = g;
  cpu::silu_mul(g.data(), u.data(), 100);
  cpu::reference::silu_mul(gref.data(), u.data(), 100);
  require_close(g, gref);
}

TEST_CASE("paged attention over scattered blocks matches contiguous reference attention", "[kernels]") {
  std::mt19937 rng(3);
  struct Shape { int n_heads, n_kv_heads, head_dim, block_size, start_pos, n_tokens; };
  for (Shape s : {Shape{8, 4, 8, 16, 0, 1}, Shape{8, 4, 8, 16, 0, 37}, Shape{4, 4, 64, 4, 9, 1},
                  Shape{6, 2, 16, 8, 20, 5}, Shape{2, 1, 128, 1, 3, 3}}) {
    const int n_ctx = s.start_pos + s.n_tokens, kv_row = s.n_kv_heads * s.head_dim, q_row = s.n_heads * s.head_dim;
    const int n_blocks_used = (n_ctx + s.block_size - 1) / s.block_size, pool_blocks = n_blocks_used * 2 + 3;
    // Blocks are scattered: sequence block i lives in pool block (2*i + 1) in reverse order.
    std::vector<uint32_t> table(n_blocks_used);
    for (int i = 0; i < n_blocks_used; ++i) table[i] = uint32_t(pool_blocks - 1 - 2 * i);
    const int64_t block_stride = int64_t(2) * s.block_size * kv_row;  // k and v interleaved per block, as KvCache
    std::vector<float> pool(size_t(pool_blocks) * block_stride, 0.0f);
    auto k = random_vector(size_t(n_ctx) * kv_row, rng), v = random_vector(size_t(n_ctx) * kv_row, rng);
    for (int j = 0; j < n_ctx; ++j) {
      float* kb = pool.data() + table[j / s.block_size] * block_stride + (j % s.block_size) * kv_row;
      std::copy_n(k.data() + size_t(j) * kv_row, kv_row, kb);
      std::copy_n(v.data() + size_t(j) * kv_row, kv_row, kb + s.block_size * kv_row);
    }
    auto q = random_vector(size_t(s.n_tokens) * q_row, rng);
    std::vector<float> out(q.size()), ref(q.size()), scratch(n_ctx);
    cpu::PagedAttentionParams p;
    p.q = q.data();
    p.out = out.data();
    p.n_tokens = s.n_tokens;
    p.start_pos = s.start_pos;
    p.n_heads = s.n_heads;
    p.n_kv_heads = s.n_kv_heads;
    p.head_dim = s.head_dim;
    p.block_size = s.block_size;
    p.block_table = table.data();
    p.k_base = pool.data();
    p.v_base = pool.data() + s.block_size * kv_row;
    p.block_stride = block_stride;
    p.scratch = scratch.data();
    cpu::paged_attention(p);
    cpu::reference::attention(q.data(), k.data(), v.data(), ref.data(), s.n_tokens, s.start_pos, s.n_heads,
                              s.n_kv_heads, s.head_dim);
    require_close(out, ref, 1e-5f);
  }
}
