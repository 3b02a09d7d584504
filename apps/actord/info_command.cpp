// actord info: what this machine offers and what actord will run on it: the CPU's model, extensions and caches, the
// kernels each product uses with groups[].cpu_isa: auto, OpenBLAS, and the CUDA devices (or why there are none).
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "apps/actord/commands.hpp"
#include "core/host_cpus.hpp"
#include "executors/cpu/cpu_features.hpp"
#include "executors/cpu/gemm.hpp"
#include "executors/cpu/quantized_weights.hpp"
#include "executors/cuda/cuda_backend.hpp"

namespace actord::cli {

namespace {

std::string bytes_text(uint64_t b) {
  if (b >= (uint64_t{1} << 20) && b % (uint64_t{1} << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

std::string join(const std::vector<std::string>& parts, const char* separator = " ") {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : separator) + p;
  return out;
}

// The kernels products of `w`'s kind take under auto, by rows of activations (product_path): [(from rows, path)],
// one entry per change up to kMaxRows rows.
std::vector<std::pair<int, cpu::ProductPath>> path_ranges(const cpu::WeightMatrix& w) {
  constexpr int kMaxRows = 4096;
  std::vector<std::pair<int, cpu::ProductPath>> ranges;
  for (int m = 1; m <= kMaxRows; ++m) {
    const cpu::ProductPath path = cpu::product_path(cpu::Isa::automatic, m, w);
    if (ranges.empty() || ranges.back().second != path) ranges.emplace_back(m, path);
  }
  return ranges;
}

// The kinds of weights `actord info` names paths for: JSON key, text label, what the dispatch reads of them.
struct WeightKind {
  const char* key;
  const char* label;
  cpu::WeightMatrix w;
};
std::vector<WeightKind> weight_kinds() {
  cpu::WeightMatrix bf16;
  bf16.dtype = DType::bf16;
  bf16.layout = cpu::WeightLayout::blocked;
  cpu::WeightMatrix f16 = bf16, int8 = bf16, int4 = bf16, int4_g128 = bf16;
  f16.dtype = DType::f16;
  int8.layout = int4.layout = int4_g128.layout = cpu::WeightLayout::quantized;
  int8.quant = {8, 32, false};
  int4.quant = {4, 32, true};
  int4_g128.quant = {4, 128, true};
  return {{"bf16", "bf16 weights", bf16},
          {"f16_f32", "f16 and f32 weights", f16},
          {"int8", "8-bit quantized weights", int8},
          {"int4", "4-bit quantized weights in groups of 32 (Q4_0, Q4_K, model.quantization: int4)", int4},
          {"int4_g128", "4-bit quantized weights in groups of 128 (AWQ, GPTQ)", int4_g128}};
}

}  // namespace

CLI::App* add_info_command(CLI::App& app, InfoArgs& args) {
  auto* cmd = app.add_subcommand("info", "Print what this machine offers (CPU extensions and caches, CUDA devices) and "
                                         "which kernels actord runs on it; starts nothing");
  cmd->add_flag("--json", args.json, "Print it as one JSON object");
  return cmd;
}

int run_info(const InfoArgs& args) {
  const cpu::CpuFeatures f = cpu::CpuFeatures::detect();
  const cpu::Isa isa = cpu::detected_isa();
  const std::string isa_text = cpu::isa_name(isa);
  // What the extensions the kernels do not use yet would be for.
  std::vector<std::string> unused;
  if (f.amx_bf16 && !cpu::amx_ready()) unused.push_back(std::string("amx-bf16 (") + cpu::amx_status() + ")");
  if (f.amx_int8 && !cpu::amx_int8_ready()) unused.push_back("amx-int8 (int8 tile products: not usable here)");
  const std::string amx_text =
      cpu::amx_ready() ? "used for bf16 weights from " + std::to_string(cpu::kAmxMinRows) +
                             " rows under auto (amx: tiles of bf16 activations and weights, f32 sums; fewer rows: " +
                             (cpu::bf16_dot_beats_fma()
                                  ? std::string("vdpbf16ps")
                                  : std::string("f32 FMA on the bf16-rounded rows, vdpbf16ps being slower here")) +
                             ")"
                       : std::string("not used: ") + cpu::amx_status();
  const std::string amx_int8_text = cpu::amx_int8_ready()
                                        ? " ; quantized codes x int8 activations on TDPBSUD tiles from " +
                                              std::to_string(cpu::kAmxMinRows) + " rows (8-bit), " +
                                              std::to_string(cpu::kAmxMinRows4Bit) + " rows (4-bit, in groups of " +
                                              std::to_string(cpu::kAmxMinGroup4Bit) + " or more)"
                                        : "";
  const cpu::Isa automatic = cpu::automatic_isa();
  const bool wide = automatic >= cpu::Isa::avx512;
  const std::string int8_how = cpu::vnni_products(automatic)
                                   ? std::string(wide ? "AVX512-VNNI" : "AVX-VNNI") + " (vpdpbusd)"
                                   : std::string(wide ? "AVX-512" : "AVX2") +
                                         " without VNNI (vpmaddubsw + vpmaddwd, 8-bit codes centred)";
  const std::string quantized_text =
      cpu::quantized_int8_activations(cpu::Isa::automatic)
          ? "int8 activations (per row) x int8/int4 codes with " + int8_how + ", f16 scales per group applied in f32"
          : std::string("f32 activations x int8/int4 codes dequantized in registers (") + isa_text + " FMA)";
  const std::vector<std::string> hidden = cpu::hidden_extensions(), unknown = cpu::unknown_hidden();
  const std::vector<std::string> gpus = cuda::device_names();
  const std::string gpu_reason = gpus.empty() ? cuda::unavailable_reason() : "";

  nlohmann::json caches = nlohmann::json::array();
  for (const auto& c : f.caches) {
    caches.push_back({{"level", c.level}, {"type", c.type}, {"bytes", c.bytes}, {"shared_cpus", c.shared_cpus}});
  }
  nlohmann::json products = nlohmann::json::object();
  std::vector<std::string> product_lines;
  for (const WeightKind& kind : weight_kinds()) {
    nlohmann::json ranges = nlohmann::json::array();
    std::string line;
    for (const auto& [from, path] : path_ranges(kind.w)) {
      ranges.push_back({{"from_rows", from}, {"path", cpu::product_path_name(path)}});
      line += std::string(line.empty() ? "" : ", ") + std::to_string(from) + "+ rows " + cpu::product_path_name(path);
    }
    products[kind.key] = ranges;
    product_lines.push_back(std::string(kind.label) + ": " + line);
  }
  if (args.json) {
    nlohmann::json j = {
        {"cpu", {{"model", f.model}, {"vendor", f.vendor}, {"family", f.family}, {"model_number", f.model_number},
                 {"microarchitecture", f.microarchitecture()}, {"usable_cores", usable_cpu_cores()},
                 {"extensions", f.names()}, {"caches", caches}}},
        {"kernels",
         {{"isa", isa_text},
          {"gemm", "blocked weights (bf16, f16, f32) with f32 accumulation, " + isa_text},
          {"gemm_row_major_packed_from_rows", cpu::packed_min_rows(isa)},
          {"openblas", cpu::have_blas()},
          {"bf16_dot_products", cpu::cpu_has_avx512_bf16()},
          {"amx_tiles", amx_text + amx_int8_text},
          {"products", products},
          {"quantized_gemm", quantized_text},
          {"paged_attention", isa_text},
          {"not_used_yet", unused},
          {"hidden", hidden},
          {"hidden_not_recognised", unknown}}},
        {"cuda", {{"built", cuda::built_with_cuda()}, {"devices", gpus}, {"unavailable", gpu_reason},
                  {"paths", cuda::path_names()}}}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  const std::string generation = f.microarchitecture();
  char identity[96];
  std::snprintf(identity, sizeof identity, "%s%sfamily 0x%x, model 0x%02x", generation.c_str(),
                generation.empty() ? "" : ": ", static_cast<unsigned>(f.family),
                static_cast<unsigned>(f.model_number));
  std::printf("cpu: %s (%s; %d usable cores)\n", f.model.empty() ? "unknown model" : f.model.c_str(), identity,
              usable_cpu_cores());
  std::printf("  extensions: %s\n", join(f.names()).c_str());
  if (!hidden.empty() || !unknown.empty()) {
    std::string line = hidden.empty() ? "none" : join(hidden);
    if (!unknown.empty())
      line += "; not recognised (only " + join(cpu::hideable_extensions(), ", ") + "): " + join(unknown);
    std::printf("  hidden by ACTORD_CPU_HIDE: %s\n", line.c_str());
  }
  std::string cache_text;
  for (const auto& c : f.caches) {
    cache_text += (cache_text.empty() ? "" : ", ") + std::string("L") + std::to_string(c.level) +
                  (c.type == "Data" ? "d" : c.type == "Instruction" ? "i" : "") + " " + bytes_text(c.bytes);
  }
  std::printf("  caches (cpu0): %s\n", cache_text.empty() ? "unknown" : cache_text.c_str());
  std::printf("kernels (groups[].cpu_isa: auto = %s):\n", cpu::isa_name(cpu::automatic_isa()));
  std::printf("  GEMM: weights blocked at load (bf16, f16, f32 kept as stored), converted in registers, f32 "
              "accumulation, %s; row-major weights: packed from %d rows; OpenBLAS peer: %s\n",
              isa_text.c_str(), cpu::packed_min_rows(isa), cpu::have_blas() ? "linked" : "not linked");
  std::printf("  paged attention: %s, f32 arithmetic over f32/bf16/f16 KV blocks\n", isa_text.c_str());
  const char* bf16_dot_text =
      !cpu::cpu_has_avx512_bf16() ? "not on this CPU"
      : cpu::bf16_dot_beats_fma()
          ? "used for bf16 weights under auto (avx512_bf16; groups[].cpu_isa: avx512 keeps f32 activations)"
          : "not used under auto: measured here at under 1.25x FMA's multiply-adds per second, so auto is avx512 "
            "(f32 activations) where there is no AMX (groups[].cpu_isa: avx512_bf16 forces them)";
  std::printf("  bf16 dot products (vdpbf16ps, activations rounded to bf16): %s\n", bf16_dot_text);
  std::printf("  AMX tiles (TDPBF16PS, TDPBSUD): %s%s\n", amx_text.c_str(), amx_int8_text.c_str());
  std::printf("  products under auto, by rows of activations (their type and the instructions):\n");
  for (const std::string& line : product_lines) std::printf("    %s\n", line.c_str());
  std::printf("  quantized weights (model.quantization, GGUF Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q4_K / Q6_K): %s\n",
              quantized_text.c_str());
  std::printf("  present but not used yet: %s\n", unused.empty() ? "none" : join(unused, ", ").c_str());
  if (!cuda::built_with_cuda()) {
    std::printf("cuda: %s\n", cuda::unavailable_reason().c_str());
  } else if (gpus.empty()) {
    std::printf("cuda: built (sm_90 + PTX); %s\n", gpu_reason.c_str());
  } else {
    std::printf("cuda: built (sm_90 + PTX); %zu device(s):\n", gpus.size());
    for (size_t i = 0; i < gpus.size(); ++i) std::printf("  %zu: %s\n", i, gpus[i].c_str());
  }
  if (cuda::built_with_cuda()) {
    std::printf("  paths (each to its fallback with ACTORD_CUDA_DISABLE=name,...): %s; ACTORD_CUDA_PROFILE=1 times "
                "every primitive\n", join(cuda::path_names(), ", ").c_str());
  }
  return 0;
}

}  // namespace actord::cli
