// The CUDA executor backend against the CPU backend, its reference (executors/cpu/ with their double-precision
// twins): every primitive on random inputs of several shapes and dtypes; rope + KV store + paged attention over
// scattered blocks with GQA, windows and every KV dtype; the whole stories260K forward pass (the 256-token greedy
// reference in f32) directly and through the engine with `device: cuda`. Tagged [cuda]: without a usable GPU (CI)
// each test says why and passes without checking anything else; the device tool's runs are where they count.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "cpu_rank.hpp"
#include "engine_test_util.hpp"
#include "executors/cuda/cuda_backend.hpp"
#include "executors/sampler.hpp"
#include "memory/kv_cache.hpp"
#include "plugins/model_registry.hpp"

using namespace actord;

namespace {

// Whether a GPU is there; says why not when it is not.
bool have_gpu() {
  if (cuda::device_count() > 0) return true;
  WARN("skipped: " << cuda::unavailable_reason());
  return false;
}

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

// The two backends side by side.
struct Pair {
  test::CpuRank cpu{2};
  std::unique_ptr<exec::Backend> gpu;
  // disable / enable: ACTORD_CUDA_DISABLE / ACTORD_CUDA_ENABLE for this pair's GPU backend (read when it is made),
  // e.g. "flash_prefill" / "early_launch".
  explicit Pair(const char* disable = nullptr, const char* enable = nullptr) {
    if (disable) setenv("ACTORD_CUDA_DISABLE", disable, 1);
    if (enable) setenv("ACTORD_CUDA_ENABLE", enable, 1);
    auto made = cuda::make_backend(0);
    if (disable) unsetenv("ACTORD_CUDA_DISABLE");
    if (enable) unsetenv("ACTORD_CUDA_ENABLE");
    if (!made) FAIL(made.error().message);
    gpu = std::move(*made);
  }
  std::vector<float> read(exec::Backend& b, const exec::Buffer& buf, size_t n) {
    std::vector<float> out(n);
    b.download(buf, 0, out);
    return out;
  }
};

// |a - b| <= tol * max(1, max |a|) element by element.
void check_close(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  REQUIRE(got.size() == want.size());
  double scale = 1.0;
  for (float w : want) scale = std::max(scale, double(std::fabs(w)));
  size_t worst = 0;
  double worst_err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(double(got[i]) - double(want[i]));
    if (err > worst_err) {
      worst_err = err;
      worst = i;
    }
  }
  INFO("worst at " << worst << ": " << (got.empty() ? 0.0f : got[worst]) << " vs "
                   << (want.empty() ? 0.0f : want[worst]) << ", scale " << scale);
  CHECK(worst_err <= tol * scale);
}

// A row-major matrix of `dtype` holding `values` rounded.
struct HostMatrixData {
  std::vector<unsigned char> bytes;
  exec::HostMatrix m;
  HostMatrixData(const std::vector<float>& values, int64_t rows, int64_t cols, DType dtype)
      : bytes(values.size() * dtype_size(dtype)) {
    convert_from_f32(dtype, values.data(), bytes.data(), values.size());
    m = exec::HostMatrix{dtype, bytes.data(), rows, cols, 0};
  }
};

// A bf16 embedding table on both backends of a pair, for the steps that run ahead: the GPU's embedding of a batch
// naming previous_pick tokens must equal the CPU's of the same batch with the tokens they resolve to.
struct EmbeddingTables {
  HostMatrixData host;
  exec::Weight gpu, cpu;
  EmbeddingTables(Pair& p, int vocab, int dim, uint32_t seed)
      : host(random_values(size_t(vocab) * size_t(dim), seed), vocab, dim, DType::bf16), dim_(dim) {
    auto on_gpu = p.gpu->upload_matrix(host.m, exec::WeightUse::lookup);
    auto on_cpu = p.cpu.backend.upload_matrix(host.m, exec::WeightUse::lookup);
    REQUIRE(on_gpu.ok());
    REQUIRE(on_cpu.ok());
    gpu = std::move(*on_gpu);
    cpu = std::move(*on_cpu);
  }
  // The CPU's embedding of `batch` with `tokens` in place of its own.
  std::vector<float> on_cpu(Pair& p, ForwardBatch batch, std::vector<int32_t> tokens) const {
    exec::Backend& cpu_backend = p.cpu.backend;
    batch.tokens = std::move(tokens);
    exec::Buffer out;
    cpu_backend.reserve(out, batch.tokens.size() * size_t(dim_));
    cpu_backend.begin_step(batch);
    cpu_backend.embed(batch.tokens, cpu, 0, out);
    return p.read(cpu_backend, out, batch.tokens.size() * size_t(dim_));
  }

 private:
  int dim_;
};

}  // namespace

TEST_CASE("cuda: gemm, gemm_accumulate, gemm_multi and gemm_glu equal the CPU backend for f32, bf16 and f16 weights",
          "[cuda]") {
  if (!have_gpu()) return;
  Pair p;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    // n <= 8 with cols % 8 == 0: the weight-streaming kernel for 16-bit weights; cols 1000 takes its four loads in
    // flight and a remainder, cols 36 goes to cuBLAS.
    for (auto [rows, cols] : {std::pair{32, 64}, {100, 72}, {256, 512}, {67, 1000}, {24, 36}}) {
      for (int n : {1, 3, 8, 17, 64}) {
        INFO(dtype_name(dtype) << " W [" << rows << ", " << cols << "] x n " << n);
        const HostMatrixData w(random_values(size_t(rows) * cols, 1 + rows, 0.1f), rows, cols, dtype);
        const auto x = random_values(size_t(n) * cols, 7 + n);
        const auto bias = random_values(size_t(rows), 3);
        // f32: both sum in f32; 16-bit: the GPU rounds x to the weights' type, the CPU keeps it in f32.
        const double tol = dtype == DType::f32 ? 1e-5 : 2e-2;
        std::vector<float> out[2];
        exec::Backend* backends[2] = {&p.cpu.backend, p.gpu.get()};
        for (int b = 0; b < 2; ++b) {
          exec::Backend& be = *backends[b];
          auto weight = be.upload_matrix(w.m, exec::WeightUse::gemm);
          REQUIRE(weight.ok());
          const exec::Buffer xb = be.upload(x), bb = be.upload(bias);
          exec::Buffer y;
          be.reserve(y, size_t(n) * rows);
          be.gemm(xb, *weight, &bb, y, n);
          out[b] = p.read(be, y, size_t(n) * rows);
        }
        check_close(out[1], out[0], tol);

        // y += x W^T over a residual stream (the small-batch kernel's or cuBLAS's epilogue; the CPU's default
        // product then add): the same as gemm plus add.
        const auto residual = random_values(size_t(n) * rows, 19 + n);
        for (int b = 0; b < 2; ++b) {
          exec::Backend& be = *backends[b];
          auto weight = be.upload_matrix(w.m, exec::WeightUse::gemm);
          REQUIRE(weight.ok());
          const exec::Buffer xb = be.upload(x);
          exec::Buffer y = be.upload(residual), scratch;
          be.reserve(scratch, size_t(n) * rows);
          be.gemm_accumulate(xb, *weight, y, n, scratch);
          out[b] = p.read(be, y, size_t(n) * rows);
        }
        check_close(out[1], out[0], tol);

        // The fused gated MLP half: silu(x G^T) * (x U^T).
        const HostMatrixData up(random_values(size_t(rows) * cols, 11 + rows, 0.1f), rows, cols, dtype);
        for (int b = 0; b < 2; ++b) {
          exec::Backend& be = *backends[b];
          auto glu = be.upload_glu(w.m, up.m);
          REQUIRE(glu.ok());
          const exec::Buffer xb = be.upload(x);
          exec::Buffer y;
          be.reserve(y, size_t(n) * rows);
          be.gemm_glu(xb, *glu, rows, y, n);
          out[b] = p.read(be, y, size_t(n) * rows);
        }
        check_close(out[1], out[0], tol);

        // Three products of one x (Q, K and V: rows, rows / 2 + 3, rows / 4 + 1 outputs), the first and last with
        // a bias: one launch of the small-batch kernel where it fits.
        const int rows_k = rows / 2 + 3, rows_v = rows / 4 + 1;
        const HostMatrixData wk(random_values(size_t(rows_k) * cols, 13 + rows, 0.1f), rows_k, cols, dtype);
        const HostMatrixData wv(random_values(size_t(rows_v) * cols, 17 + rows, 0.1f), rows_v, cols, dtype);
        const auto bias_v = random_values(size_t(rows_v), 5);
        std::vector<float> outs[2][3];
        for (int b = 0; b < 2; ++b) {
          exec::Backend& be = *backends[b];
          auto q_w = be.upload_matrix(w.m, exec::WeightUse::gemm), k_w = be.upload_matrix(wk.m, exec::WeightUse::gemm),
               v_w = be.upload_matrix(wv.m, exec::WeightUse::gemm);
          REQUIRE((q_w.ok() && k_w.ok() && v_w.ok()));
          const exec::Buffer xb = be.upload(x), bq = be.upload(bias), bv = be.upload(bias_v);
          exec::Buffer yq, yk, yv;
          be.reserve(yq, size_t(n) * rows);
          be.reserve(yk, size_t(n) * rows_k);
          be.reserve(yv, size_t(n) * rows_v);
          const exec::GemmTarget targets[3] = {{&*q_w, &bq, &yq}, {&*k_w, nullptr, &yk}, {&*v_w, &bv, &yv}};
          be.gemm_multi(xb, targets, n);
          outs[b][0] = p.read(be, yq, size_t(n) * rows);
          outs[b][1] = p.read(be, yk, size_t(n) * rows_k);
          outs[b][2] = p.read(be, yv, size_t(n) * rows_v);
        }
        for (int t = 0; t < 3; ++t) check_close(outs[1][t], outs[0][t], tol);
      }
    }
  }
}

// Products launched early (early_launch) start while the kernel before them runs and must wait for what it wrote:
// a chain of layers, each product reading what the norm or the product before it wrote and adding to the residual
// stream the next layer reads, gives the same bits as with every product launched after the kernel before it.
TEST_CASE("cuda: products launched early read what the kernel before them wrote - the same bits as launched after",
          "[cuda]") {
  if (!have_gpu()) return;
  Pair early(nullptr, "early_launch"), after("early_launch");
  const int h = 1024, ff = 2816, kv = 256, layers = 6;
  const HostMatrixData q(random_values(size_t(h) * h, 31, 0.05f), h, h, DType::bf16);
  const HostMatrixData k(random_values(size_t(kv) * h, 32, 0.05f), kv, h, DType::bf16);
  const HostMatrixData o(random_values(size_t(h) * h, 33, 0.05f), h, h, DType::bf16);
  const HostMatrixData gate(random_values(size_t(ff) * h, 34, 0.05f), ff, h, DType::bf16);
  const HostMatrixData up(random_values(size_t(ff) * h, 35, 0.05f), ff, h, DType::bf16);
  const HostMatrixData down(random_values(size_t(h) * ff, 36, 0.05f), h, ff, DType::bf16);
  const auto norm_w = random_values(size_t(h), 37, 1.0f);
  for (int n : {1, 4}) {
    INFO("rows " << n);
    const auto x0 = random_values(size_t(n) * h, 38 + n);
    std::vector<float> got[2];
    Pair* pairs[2] = {&early, &after};
    for (int b = 0; b < 2; ++b) {
      exec::Backend& be = *pairs[b]->gpu;
      auto wq = be.upload_matrix(q.m, exec::WeightUse::gemm), wk = be.upload_matrix(k.m, exec::WeightUse::gemm),
           wo = be.upload_matrix(o.m, exec::WeightUse::gemm), wd = be.upload_matrix(down.m, exec::WeightUse::gemm);
      auto glu = be.upload_glu(gate.m, up.m);
      REQUIRE((wq.ok() && wk.ok() && wo.ok() && wd.ok() && glu.ok()));
      exec::Buffer x = be.upload(x0), nw = be.upload(norm_w), xn, yq, yk, g, scratch;
      be.reserve(xn, size_t(n) * h);
      be.reserve(yq, size_t(n) * h);
      be.reserve(yk, size_t(n) * kv);
      be.reserve(g, size_t(n) * ff);
      be.reserve(scratch, size_t(n) * h);
      for (int l = 0; l < layers; ++l) {
        be.rms_norm(x, nw, xn, n, h, 1e-5f);
        const exec::GemmTarget qk[2] = {{&*wq, nullptr, &yq}, {&*wk, nullptr, &yk}};
        be.gemm_multi(xn, qk, n);
        be.gemm_accumulate(yq, *wo, x, n, scratch);  // x += (q of the norm of x) O^T
        be.rms_norm(x, nw, xn, n, h, 1e-5f);
        be.gemm_glu(xn, *glu, ff, g, n);
        be.gemm_accumulate(g, *wd, x, n, scratch);  // x += silu(gate) * up D^T
      }
      got[b] = pairs[b]->read(be, x, size_t(n) * h);
      for (float v : got[b]) REQUIRE(std::isfinite(v));
    }
    CHECK(got[0] == got[1]);
  }
}

TEST_CASE("cuda: row_bests (the greedy pick of each row) equals the CPU backend's - ties - NaN - -inf - widths",
          "[cuda]") {
  if (!have_gpu()) return;
  Pair p;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const int width : {1, 7, 31, 256, 1000, 32000, 128256}) {
    DYNAMIC_SECTION("width " << width) {
      const int rows = 9;
      std::vector<float> x = random_values(size_t(rows) * width, uint32_t(width));
      for (float& v : x) v = std::round(v * 8) / 8;  // coarse: ties within a row
      std::fill_n(x.begin() + width, width, -inf);   // row 1: -inf only
      std::fill_n(x.begin() + 2 * width, width, nan);  // row 2: NaN only
      for (int c = 0; c < width; c += 3) x[size_t(3) * width + c] = nan;  // row 3: NaN among values
      x[size_t(4) * width + width - 1] = 5.0f;  // row 4: the best in the last column
      std::vector<RowBest> want(rows), got(rows);
      exec::Backend* backends[2] = {&p.cpu.backend, p.gpu.get()};
      std::vector<RowBest>* outs[2] = {&want, &got};
      for (int b = 0; b < 2; ++b) {
        const exec::Buffer xb = backends[b]->upload(x);
        backends[b]->row_bests(xb, rows, width, 1000, *outs[b]);
      }
      for (int r = 0; r < rows; ++r) {
        INFO("row " << r);
        CHECK(got[size_t(r)].id == want[size_t(r)].id);
        CHECK((got[size_t(r)].logit == want[size_t(r)].logit));
      }
      CHECK(want[1].id == 1000);
      CHECK(want[2].logit == -inf);
    }
  }
}

TEST_CASE("cuda: picks left on the device (defer_reads) reach the host at complete_reads and the next step's embedding",
          "[cuda]") {
  if (!have_gpu()) return;
  Pair p;
  exec::Backend& gpu = *p.gpu;
  exec::Backend& cpu = p.cpu.backend;
  REQUIRE(gpu.runs_ahead());
  CHECK_FALSE(cpu.runs_ahead());
  const int dim = 64, vocab = 300, rows = 5;
  const EmbeddingTables table(p, vocab, dim, 11);
  const std::vector<float> logits = random_values(size_t(rows) * vocab, 12);
  std::vector<RowBest> want(rows);
  cpu.row_bests(cpu.upload(logits), rows, vocab, 0, want);
  // Step 1 runs ahead, its forward pass in two pieces (rows 0-1, then 2-4).
  const exec::Buffer head = gpu.upload(std::span(logits).first(size_t(2) * vocab));
  const exec::Buffer tail = gpu.upload(std::span(logits).subspan(size_t(2) * vocab));
  ForwardBatch first;
  first.tokens = {1, 2, 3, 4, 5};
  first.seqs = {SeqSlice{0, 5, 0, nullptr, true}};
  gpu.begin_step(first);
  const uint64_t ticket1 = gpu.defer_reads();
  CHECK(ticket1 != 0);
  std::vector<RowBest> got(rows, RowBest{0.0f, -7});
  gpu.row_bests(head, 2, vocab, 0, std::span(got).first(2));
  gpu.row_bests(tail, 3, vocab, 0, std::span(got).subspan(2));
  // Step 2 queued behind it, naming three of its picks, before the host has them.
  ForwardBatch second;
  second.tokens = {previous_pick(4), 7, previous_pick(0), previous_pick(2)};
  second.seqs = {SeqSlice{0, 4, 0, nullptr, true}};
  exec::Buffer embedded;
  gpu.reserve(embedded, second.tokens.size() * dim);
  gpu.begin_step(second);
  const uint64_t ticket2 = gpu.defer_reads();
  CHECK(ticket2 != ticket1);
  gpu.embed(second.tokens, table.gpu, 0, embedded);
  CHECK(got[0].id == -7);  // not written before complete_reads
  gpu.complete_reads(ticket1);
  CHECK(gpu.reads_done(ticket1));
  for (int r = 0; r < rows; ++r) {
    INFO("row " << r);
    CHECK(got[size_t(r)].id == want[size_t(r)].id);
    CHECK(got[size_t(r)].logit == want[size_t(r)].logit);
  }
  const std::vector<float> on_gpu = p.read(gpu, embedded, second.tokens.size() * dim);
  gpu.complete_reads(ticket2);  // a step without picks
  CHECK(on_gpu == table.on_cpu(p, second, {want[4].id, 7, want[0].id, want[2].id}));
}

TEST_CASE("cuda: draws of a step that runs ahead stay on the device for the next step's embedding - tokens at "
          "complete_reads",
          "[cuda]") {
  if (!have_gpu()) return;
  Pair p;
  exec::Backend& gpu = *p.gpu;
  const int dim = 64, vocab = 5000, rows = 4;
  const EmbeddingTables table(p, vocab, dim, 21);
  // Rows: a plain draw, top-k with top-p, min-p, and a flat row (temperature 4: a head wider than the candidates).
  std::vector<SamplingOptions> options(static_cast<size_t>(rows));
  options[1].top_k = 30;
  options[1].top_p = 0.9f;
  options[2].min_p = 0.1f;
  options[3].temperature = 4.0f;
  std::vector<SampleRequest> requests(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    options[size_t(r)].seed = uint64_t(40 + r);
    requests[size_t(r)].options = &options[size_t(r)];
    requests[size_t(r)].sample_index = 3;
  }
  SamplingOptions with_logprobs = options[0];
  with_logprobs.logprobs = 1;
  std::vector<SampleRequest> asking = requests;
  asking[0].options = &with_logprobs;
  const std::vector<float> logits = random_values(size_t(rows) * vocab, 22);
  std::vector<SampledToken> want(static_cast<size_t>(rows)), got(static_cast<size_t>(rows));
  Sampler host;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> row(logits.begin() + long(size_t(r) * vocab), logits.begin() + long(size_t(r + 1) * vocab));
    want[size_t(r)] = host.sample(row.data(), vocab, requests[size_t(r)]);
  }
  // Not before the device sampler's checked calls (each draws on the host too), never with logprobs.
  CHECK_FALSE(gpu.samples_ahead(requests, vocab));
  for (int check = 0; check < 3; ++check) {
    exec::Buffer dev = gpu.upload(logits);
    REQUIRE(gpu.sample_rows(dev, rows, vocab, requests, got));
  }
  INFO(cuda::device_sampling_state(gpu));
  REQUIRE(gpu.samples_ahead(requests, vocab));
  CHECK_FALSE(gpu.samples_ahead(asking, vocab));
  // Step 1 runs ahead and draws its rows; step 2, queued behind it, embeds two of them.
  exec::Buffer dev = gpu.upload(logits);
  ForwardBatch first;
  first.tokens = {1, 2, 3, 4};
  first.seqs = {SeqSlice{0, 4, 0, nullptr, true}};
  gpu.begin_step(first);
  const uint64_t ticket1 = gpu.defer_reads();
  std::vector<SampledToken> drawn(static_cast<size_t>(rows), SampledToken{-7, 0.0f, {}});
  REQUIRE(gpu.sample_rows(dev, rows, vocab, requests, drawn));
  ForwardBatch second;
  second.tokens = {previous_pick(3), 9, previous_pick(1)};
  second.seqs = {SeqSlice{0, 3, 0, nullptr, true}};
  exec::Buffer embedded;
  gpu.reserve(embedded, second.tokens.size() * dim);
  gpu.begin_step(second);
  const uint64_t ticket2 = gpu.defer_reads();
  gpu.embed(second.tokens, table.gpu, 0, embedded);
  CHECK(drawn[0].token == -7);  // not written before complete_reads
  gpu.complete_reads(ticket1);
  for (int r = 0; r < rows; ++r) {
    INFO("row " << r);
    CHECK(drawn[size_t(r)].token == want[size_t(r)].token);
  }
  const std::vector<float> on_gpu = p.read(gpu, embedded, second.tokens.size() * dim);
  gpu.complete_reads(ticket2);
  CHECK(on_gpu == table.on_cpu(p, second, {want[3].token, 9, want[1].token}));
}

TEST_CASE("cuda: norm, activations, add, scale, softcap, embedding, gathers, scatters and column copies equal the CPU backend",
          "[cuda]") {
  if (!have_gpu()) return;
  Pair p;
  exec::Backend* backends[2] = {&p.cpu.backend, p.gpu.get()};
  const int n = 37, dim = 200;
  const auto x = random_values(size_t(n) * dim, 1), w = random_values(size_t(dim), 2), y = random_values(size_t(n) * dim, 3);
  std::vector<float> out[2];
  for (int b = 0; b < 2; ++b) {
    exec::Backend& be = *backends[b];
    const exec::Buffer xb = be.upload(x), wb = be.upload(w);
    exec::Buffer yb;
    be.reserve(yb, size_t(n) * dim);
    be.rms_norm(xb, wb, yb, n, dim, 1e-5f);
    out[b] = p.read(be, yb, size_t(n) * dim);
  }
  check_close(out[1], out[0], 1e-5);
  // Norm widths of the float4 kernel (a multiple of 4, up to 8192: one row of a model's hidden state in registers)
  // and of the general one (8196, 130), in place too (the q / k norms of Qwen3 write over their input).
  for (const int width : {4096, 8192, 8196, 130}) {
    INFO("norm width " << width);
    const int rows = 3;
    const auto xs = random_values(size_t(rows) * width, uint32_t(width)), ws = random_values(size_t(width), 5);
    std::vector<float> normed[2], in_place[2];
    for (int b = 0; b < 2; ++b) {
      exec::Backend& be = *backends[b];
      exec::Buffer xb = be.upload(xs);
      const exec::Buffer wb = be.upload(ws);
      exec::Buffer yb;
      be.reserve(yb, xs.size());
      be.rms_norm(xb, wb, yb, rows, width, 1e-6f);
      normed[b] = p.read(be, yb, xs.size());
      be.rms_norm(xb, wb, xb, rows, width, 1e-6f);
      in_place[b] = p.read(be, xb, xs.size());
    }
    check_close(normed[1], normed[0], 1e-5);
    check_close(in_place[1], in_place[0], 1e-5);
  }
  for (auto act : {exec::GatedActivation::silu, exec::GatedActivation::gelu_tanh, exec::GatedActivation::gelu}) {
    for (int b = 0; b < 2; ++b) {
      exec::Backend& be = *backends[b];
      exec::Buffer gate = be.upload(x);
      const exec::Buffer up = be.upload(y);
      be.gated_activation(act, gate, up, x.size());
      be.add(gate, up, x.size());
      be.scale(gate, 33.9375f, x.size());  // Gemma's embedding scale, sqrt(1152) in f16
      be.softcap(gate, 30.0f, x.size());   // Gemma 2's logit cap
      out[b] = p.read(be, gate, x.size());
    }
    check_close(out[1], out[0], 1e-5);
  }
  // Embedding of a vocabulary part [100, 100 + 50) with tokens inside and outside it.
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    const HostMatrixData table(random_values(size_t(50) * dim, 9), 50, dim, dtype);
    ForwardBatch batch;
    batch.tokens = {100, 149, 3, 120, 150, 101};
    batch.seqs = {SeqSlice{0, 6, 0, nullptr, true}};
    for (int b = 0; b < 2; ++b) {
      exec::Backend& be = *backends[b];
      auto t = be.upload_matrix(table.m, exec::WeightUse::lookup);
      REQUIRE(t.ok());
      exec::Buffer e;
      be.reserve(e, batch.tokens.size() * dim);
      be.begin_step(batch);
      be.embed(batch.tokens, *t, 100, e);
      out[b] = p.read(be, e, batch.tokens.size() * dim);
    }
    CHECK(out[1] == out[0]);
  }
  // Gather rows, scatter-add them back weighted (a row twice), copy columns, zero.
  const std::vector<int32_t> rows{5, 0, 36, 5, 12};
  const std::vector<float> weights{0.5f, -1.0f, 2.0f, 0.25f, 1.0f};
  for (int b = 0; b < 2; ++b) {
    exec::Backend& be = *backends[b];
    const exec::Buffer xb = be.upload(x);
    exec::Buffer g, acc = be.upload(y), cols;
    be.reserve(g, rows.size() * dim);
    be.gather_rows(xb, rows, dim, g);
    be.scatter_add_rows(g, rows, weights, dim, acc);
    be.reserve(cols, size_t(n) * (dim + 10));
    be.zero(cols, size_t(n) * (dim + 10));
    be.copy_columns(acc, 0, n, dim, cols, dim + 10, 10);
    out[b] = p.read(be, cols, size_t(n) * (dim + 10));
  }
  check_close(out[1], out[0], 1e-6);
}

namespace {

// One step of rope + KV store + paged attention on both backends: sequences {tokens, start position} each with
// `blocks_per_seq` blocks of their own (a permutation of the pool: 7 is coprime with every pool size used), K / V of
// earlier positions already cached (the same random bytes in both), random q, k, v from `seed`.
struct AttentionRun {
  std::vector<float> rotated[2], attended[2], stored[2];  // [CPU, GPU]: q after RoPE, attention, the cache's values
};
AttentionRun attention_on_both(Pair& p, const std::vector<std::pair<int, int>>& slices, int blocks_per_seq,
                               int head_dim, DType kv_dtype, int window, uint32_t seed) {
  constexpr int kBlock = 16, nh = 8, nkv = 2;
  const int n_seqs = static_cast<int>(slices.size()), n_blocks = n_seqs * blocks_per_seq;
  ForwardBatch batch;
  std::vector<std::vector<uint32_t>> tables(static_cast<size_t>(n_seqs));
  for (int s = 0; s < n_seqs; ++s) {
    for (int i = 0; i < blocks_per_seq; ++i) {
      tables[size_t(s)].push_back(uint32_t((s * blocks_per_seq + i) * 7 % n_blocks));
    }
  }
  int first = 0;
  for (auto [len, start] : slices) {
    const int s = static_cast<int>(batch.seqs.size());
    batch.seqs.push_back(SeqSlice{first, len, start, tables[size_t(s)].data(), true});
    for (int i = 0; i < len; ++i) batch.tokens.push_back(1);
    first += len;
  }
  const int n = first;
  const auto q = random_values(size_t(n) * nh * head_dim, seed), k = random_values(size_t(n) * nkv * head_dim, seed + 1),
             v = random_values(size_t(n) * nkv * head_dim, seed + 2);
  std::vector<unsigned char> prior(KvCache::bytes_for(1, nkv, head_dim, n_blocks, kBlock, kv_dtype));
  {
    const auto values = random_values(prior.size() / dtype_size(kv_dtype), seed + 3);
    convert_from_f32(kv_dtype, values.data(), prior.data(), values.size());
  }
  std::vector<float> inv_freq(size_t(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) inv_freq[size_t(i)] = std::pow(10000.0f, -2.0f * i / head_dim);
  AttentionRun run;
  exec::Backend* backends[2] = {&p.cpu.backend, p.gpu.get()};
  for (int b = 0; b < 2; ++b) {
    exec::Backend& be = *backends[b];
    auto kv = test::kv_cache_on(be, 1, nkv, head_dim, n_blocks, kBlock, kv_dtype);
    for (int blk = 0; blk < n_blocks; ++blk) kv->write_block(uint32_t(blk), prior.data() + size_t(blk) * kv->block_bytes());
    exec::Buffer qb = be.upload(q), kb = be.upload(k), out;
    const exec::Buffer vb = be.upload(v), fb = be.upload(inv_freq);
    be.reserve(out, q.size());
    exec::AttentionShape shape{nh, nkv, head_dim, window};
    exec::KvLayer layer{kv->keys(0), kv->values(0), kv_dtype, kBlock, kv->block_stride(), kv->head_stride()};
    be.begin_step(batch);
    be.rope_and_store_kv(batch, qb, kb, vb, shape, fb, layer);
    be.paged_attention(batch, qb, out, shape, layer);
    run.rotated[b] = p.read(be, qb, q.size());
    run.attended[b] = p.read(be, out, q.size());
    std::vector<unsigned char> blocks(prior.size());
    for (int blk = 0; blk < n_blocks; ++blk) kv->read_block(uint32_t(blk), blocks.data() + size_t(blk) * kv->block_bytes());
    run.stored[b].resize(prior.size() / dtype_size(kv_dtype));
    convert_to_f32(kv_dtype, blocks.data(), run.stored[b].data(), run.stored[b].size());
  }
  return run;
}

}  // namespace

TEST_CASE("cuda: rope, KV store and paged attention equal the CPU backend (GQA, windows, every KV dtype)", "[cuda]") {
  if (!have_gpu()) return;
  Pair p;
  for (int head_dim : {8, 64, 80, 128}) {
    for (DType kv_dtype : {DType::f32, DType::bf16, DType::f16}) {
      for (int window : {0, 5, 40}) {
        INFO("head_dim " << head_dim << ", kv " << dtype_name(kv_dtype) << ", window " << window);
        // A prefill of 40 tokens from position 0 (two prefill tiles for head_dim 64 / 128), a chunk of 7 from
        // position 33 (under kPrefillMinTokens: the per-query kernel), a chunk of 45 from position 60 (tiles over
        // cached keys), and two decodes at 100 and 5.
        const AttentionRun run =
            attention_on_both(p, {{40, 0}, {7, 33}, {45, 60}, {1, 100}, {1, 5}}, 10, head_dim, kv_dtype, window, 21);
        check_close(run.rotated[1], run.rotated[0], 1e-5);
        check_close(run.attended[1], run.attended[0], kv_dtype == DType::f32 ? 1e-5 : 1e-3);
        // The stored K/V: equal values (rounded alike from rotations equal to within float rounding).
        check_close(run.stored[1], run.stored[0], kv_dtype == DType::f32 ? 1e-5 : 1e-2);
      }
    }
  }
}

TEST_CASE("cuda: decodes at long contexts (split-K) equal the CPU backend - windows - head_dim 64 to 256", "[cuda]") {
  if (!have_gpu()) return;
  Pair p;
  for (int head_dim : {64, 80, 128, 256}) {
    for (DType kv_dtype : {DType::f32, DType::bf16}) {
      for (int window : {0, 300, 2000}) {
        INFO("head_dim " << head_dim << ", kv " << dtype_name(kv_dtype) << ", window " << window);
        // Decodes at positions 1300 (6 splits), 2047 (8) and 600 (under kSplitMinKeys: one warp per head).
        const AttentionRun run =
            attention_on_both(p, {{1, 1300}, {1, 2047}, {1, 600}}, 130, head_dim, kv_dtype, window, 41);
        check_close(run.attended[1], run.attended[0], kv_dtype == DType::f32 ? 1e-5 : 1e-3);
        CHECK(cuda::split_decode_state(*p.gpu) == "on");  // its first use agreed with one warp per query
      }
    }
  }
}

TEST_CASE("cuda: long prefills (600 tokens, and 520 over 100 cached) on the tensor cores equal the CPU backend",
          "[cuda]") {
  if (!have_gpu()) return;
  // The flash kernel, then the cuBLAS path (flash_prefill turned off).
  for (const char* disabled : {static_cast<const char*>(nullptr), "flash_prefill"}) {
    Pair p(disabled);
    for (int head_dim : {64, 128}) {
      for (DType kv_dtype : {DType::bf16, DType::f16, DType::f32}) {  // f32: the FMA tiles take the long ones
        for (int window : {0, 200}) {
          INFO((disabled ? disabled : "all on") << ", head_dim " << head_dim << ", kv " << dtype_name(kv_dtype)
                                                << ", window " << window);
          const AttentionRun run =
              attention_on_both(p, {{600, 0}, {520, 100}, {1, 300}}, 40, head_dim, kv_dtype, window, 31);
          // bf16 / f16 K and V in both; the tensor cores also round Q and the probabilities to that type.
          check_close(run.attended[1], run.attended[0], kv_dtype == DType::f32 ? 1e-5 : 1e-2);
        }
      }
    }
    // The path's first use agreed with the FMA tiles (the other one never ran).
    if (disabled) {
      CHECK(cuda::flash_prefill_state(*p.gpu) == "off: ACTORD_CUDA_DISABLE");
      CHECK(cuda::long_prefill_state(*p.gpu) == "on");
    } else {
      CHECK(cuda::flash_prefill_state(*p.gpu) == "on");
      CHECK(cuda::long_prefill_state(*p.gpu) == "unused");
    }
  }
}

TEST_CASE("cuda: stories260K on the GPU reproduces its 256-token greedy reference, directly and through the engine",
          "[cuda][model]") {
  if (!have_gpu()) return;
  auto gpu = cuda::make_backend(0);
  REQUIRE(gpu.ok());
  exec::Backend& be = **gpu;
  auto cfg = ModelConfig::load(test::stories_dir());
  REQUIRE(cfg.ok());
  ModelLoadOptions options;
  options.model_dir = test::stories_dir();
  options.backend = &be;
  auto model = ModelRegistry::with_builtins().create(*cfg, options);
  REQUIRE(model.ok());
  auto kv = test::kv_cache_on(be, cfg->num_layers, cfg->num_kv_heads, cfg->head_dim, 64, 8, DType::f32);
  REQUIRE_FALSE(kv->on_host());
  std::vector<uint32_t> table;
  for (uint32_t i = 0; i < 40; ++i) table.push_back((i * 7 + 3) % 64);
  CHECK(test::greedy_from_bos(**model, *kv, be, table, 256) == test::reference_ids());
  // Its first decode steps (under 16 keys: no split decodes) ran as CUDA graphs (executors/cuda/step_graphs.hpp):
  // each chunk of a step captured when its signature comes a second time, then replayed, the first steps with
  // replays checked against their launches run one by one. The later steps split their decodes and run launch by
  // launch.
  const cuda::StepGraphStats graphs = cuda::step_graph_stats(be);
  INFO("step graphs: " << graphs.state << ", " << graphs.replays << " replays, " << graphs.captures << " captures, "
                       << graphs.eager << " chunks launch by launch");
  CHECK(graphs.state == "on");
  CHECK(graphs.captures > 0);
  CHECK(graphs.replays > 0);

  auto engine = Engine::start(test::quickstart("configs/quickstart.yaml", {"groups[0].device=cuda"}),
                              test::engine_options());
  REQUIRE(engine.ok());
  GenerateRequest r;
  r.prompt_ids = {1};
  r.max_tokens = 256;
  r.sampling.temperature = 0.0f;
  auto out = (*engine)->generate({r});
  REQUIRE(out.ok());
  CHECK((*out)[0].generated_ids == test::reference_ids());
  // 16 sequences at once, each prompted with a prefix of the reference, so that its greedy continuation is the
  // reference's next tokens: prompts of 1 to 196 tokens, ends at different steps. Every decode step runs ahead of
  // its tokens (WorkerCore::step), taking the step before's picks on the device.
  const std::vector<GenerateRequest> prefixes = test::reference_prefix_requests();
  auto continued = (*engine)->generate(prefixes);
  REQUIRE(continued.ok());
  test::check_continues_reference(*continued, prefixes, prefixes.size());

  // Seeded draws with penalties through the engine: sampled on the GPU (Backend::sample_rows), the same tokens as
  // the CPU engine's (f32 logits equal to rounding: a draw would differ only on a boundary within that rounding).
  GenerateRequest sampled;
  sampled.prompt_ids = {1, 403, 121};  // stories260K's vocabulary is 512
  sampled.max_tokens = 96;
  sampled.sampling.temperature = 0.9f;
  sampled.sampling.top_p = 0.95f;
  sampled.sampling.repetition_penalty = 1.2f;
  sampled.sampling.seed = 7;
  auto on_gpu = (*engine)->generate({sampled, sampled});
  REQUIRE(on_gpu.ok());
  auto cpu_engine = Engine::start(test::quickstart("configs/quickstart.yaml", {}), test::engine_options());
  REQUIRE(cpu_engine.ok());
  auto on_cpu = (*cpu_engine)->generate({sampled});
  REQUIRE(on_cpu.ok());
  REQUIRE_FALSE((*on_cpu)[0].error);
  CHECK_FALSE((*on_cpu)[0].generated_ids.empty());
  CHECK((*on_gpu)[0].generated_ids == (*on_cpu)[0].generated_ids);
  CHECK((*on_gpu)[1].generated_ids == (*on_cpu)[0].generated_ids);  // the batch does not change a seeded draw
}

TEST_CASE("cuda: sampling on the GPU draws the CPU sampler's tokens - biases - penalties - masks - top-k - top-p - min-p",
          "[cuda]") {
  if (!have_gpu()) return;
  Pair p;
  for (const int vocab : {1000, 32000, 128256}) {
    // Options by row: greedy, plain draws at three temperatures, top-k (small, at the candidates' limit, wider: the
    // host), top-p, min-p, all three, penalties and masks, logprobs (the host); then rows the candidate lists cannot
    // hold, walked over the whole row on the GPU: a top-k 50 of a row of equal logits (every token ties the 50th),
    // flat rows (temperature 4) with top-p 0.99 and without; logit biases, greedy and drawn, with a penalty.
    std::vector<SamplingOptions> options(19);
    options[0].temperature = 0.0f;
    options[1].temperature = 0.3f;
    options[2].temperature = 1.0f;
    options[3].temperature = 1.7f;
    options[4].top_k = 40;
    options[5].top_k = 1024;
    options[6].top_k = 1500;
    options[7].top_p = 0.8f;
    options[8].min_p = 0.05f;
    options[9].top_k = 100;
    options[9].top_p = 0.95f;
    options[9].min_p = 0.02f;
    options[10].repetition_penalty = 1.4f;
    options[10].frequency_penalty = 0.3f;
    options[10].presence_penalty = 0.2f;
    options[11].temperature = 0.0f;
    options[11].repetition_penalty = 2.0f;
    options[12].min_tokens = 5;
    options[13].logprobs = 3;
    options[14].top_k = 50;
    options[15].temperature = 4.0f;
    options[15].top_p = 0.99f;
    options[16].temperature = 4.0f;
    options[17].temperature = 0.0f;
    options[17].logit_bias = {{7, 30.0f}, {500, -100.0f}, {999, 2.5f}};
    options[18].logit_bias = {{5, 3.0f}, {77, -4.0f}, {900, 6.0f}};
    options[18].repetition_penalty = 1.3f;
    PenaltyHistory history;
    const std::vector<int32_t> prompt{1, 5, 9, 400};
    history.add_prompt(prompt);
    for (int32_t id : {5, 77, 77, 300}) history.add_output(id);
    const std::vector<int32_t> stops{2, 3};
    for (int round = 0; round < 4; ++round) {  // the first three calls are checked row by row, the fourth is not
      const int rows = int(options.size());
      std::vector<SampleRequest> requests(static_cast<size_t>(rows));
      for (int r = 0; r < rows; ++r) {
        options[size_t(r)].seed = uint64_t(100 * round + r);
        requests[size_t(r)].options = &options[size_t(r)];
        requests[size_t(r)].sample_index = uint32_t(round);
        if (options[size_t(r)].has_penalties()) requests[size_t(r)].history = &history;
        if (r == 12) requests[size_t(r)].masked_ids = stops;
      }
      // Logits of several sharpnesses: row r scaled by 0.5 .. 8.
      std::vector<float> logits = random_values(size_t(rows) * size_t(vocab), uint32_t(vocab + round));
      for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < vocab; ++c) logits[size_t(r) * size_t(vocab) + size_t(c)] *= 0.5f * float(1 + r % 5) * 1.6f;
      }
      std::fill_n(logits.begin() + long(size_t(14) * size_t(vocab)), vocab, 0.25f);
      std::vector<SampledToken> want(static_cast<size_t>(rows)), got(static_cast<size_t>(rows));
      Sampler cpu;
      for (int r = 0; r < rows; ++r) {
        std::vector<float> row(logits.begin() + long(size_t(r) * size_t(vocab)),
                               logits.begin() + long(size_t(r + 1) * size_t(vocab)));
        want[size_t(r)] = cpu.sample(row.data(), vocab, requests[size_t(r)]);
      }
      exec::Buffer dev = p.gpu->upload(logits);
      REQUIRE(p.gpu->sample_rows(dev, rows, vocab, requests, got));
      for (int r = 0; r < rows; ++r) {
        INFO("vocab " << vocab << ", round " << round << ", row " << r);
        CHECK(got[size_t(r)].token == want[size_t(r)].token);
        if (options[size_t(r)].logprobs >= 0) {
          CHECK(got[size_t(r)].logprob == want[size_t(r)].logprob);
          CHECK(got[size_t(r)].top.size() == 3u);
        }
      }
    }
    INFO(cuda::device_sampling_state(*p.gpu));
    CHECK(cuda::device_sampling_state(*p.gpu) == "on");  // the checked calls agreed
  }
}
