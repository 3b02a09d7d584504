#include "executors/cpu/cpu_features.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace actord::cpu {

namespace {

std::string read_line(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  return line;
}

// sysfs sizes read "32K", "1024K", "32768K" or "16M".
uint64_t size_of(const std::string& text) {
  if (text.empty()) return 0;
  uint64_t n = 0;
  size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') n = n * 10 + uint64_t(text[i++] - '0');
  if (i < text.size() && text[i] == 'K') n <<= 10;
  if (i < text.size() && text[i] == 'M') n <<= 20;
  return n;
}

#if defined(__x86_64__) || defined(__i386__)
// The deterministic cache parameters of CPUID leaf 4 (Intel) or 0x8000001D (AMD; the same layout), subleaf by
// subleaf until a null entry: type, level, ways x partitions x line size x sets, and how many logical processors
// may share it.
std::vector<CacheLevel> cpuid_caches(unsigned leaf) {
  std::vector<CacheLevel> out;
  for (unsigned sub = 0; sub < 16; ++sub) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    __cpuid_count(leaf, sub, a, b, c, d);
    const unsigned type = a & 0x1f;
    if (type == 0) break;
    CacheLevel level;
    level.level = static_cast<int>((a >> 5) & 7);
    level.type = type == 1 ? "Data" : type == 2 ? "Instruction" : "Unified";
    const uint64_t ways = ((b >> 22) & 0x3ff) + 1, partitions = ((b >> 12) & 0x3ff) + 1, line = (b & 0xfff) + 1;
    level.bytes = ways * partitions * line * (uint64_t(c) + 1);
    level.shared_cpus = "up to " + std::to_string(((a >> 14) & 0xfff) + 1);
    out.push_back(level);
  }
  return out;
}
#endif

// ACTORD_CPU_HIDE's names, split once.
const std::vector<std::string>& hide_list() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    const char* env = std::getenv("ACTORD_CPU_HIDE");
    std::string word;
    for (const char* c = env ? env : ""; ; ++c) {
      if (*c == ',' || *c == ' ' || *c == '\0') {
        if (!word.empty()) out.push_back(word);
        word.clear();
        if (*c == '\0') break;
      } else {
        word += *c;
      }
    }
    return out;
  }();
  return names;
}

}  // namespace

const std::vector<std::string>& hideable_extensions() {
  static const std::vector<std::string> names = {"avx_vnni", "avx512_vnni"};
  return names;
}

bool extension_hidden(const char* name) {
  for (const std::string& h : hide_list())
    if (h == name) return true;
  return false;
}

std::vector<std::string> hidden_extensions() {
  std::vector<std::string> out;
  for (const std::string& name : hideable_extensions())
    if (extension_hidden(name.c_str())) out.push_back(name);
  return out;
}

std::vector<std::string> unknown_hidden() {
  std::vector<std::string> out;
  for (const std::string& h : hide_list()) {
    const auto& known = hideable_extensions();
    if (std::find(known.begin(), known.end(), h) == known.end()) out.push_back(h);
  }
  return out;
}

CpuFeatures CpuFeatures::detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  const unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char name[13] = {};
    for (int i = 0; i < 4; ++i) {
      name[i] = static_cast<char>(b >> (8 * i));
      name[4 + i] = static_cast<char>(d >> (8 * i));
      name[8 + i] = static_cast<char>(c >> (8 * i));
    }
    f.vendor = name;
  }
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    const int base_family = static_cast<int>((a >> 8) & 0xf), base_model = static_cast<int>((a >> 4) & 0xf);
    f.family = base_family == 0xf ? base_family + static_cast<int>((a >> 20) & 0xff) : base_family;
    f.model_number = base_family == 0xf || base_family == 6 ? base_model + (static_cast<int>((a >> 16) & 0xf) << 4)
                                                            : base_model;
    f.sse42 = c & bit_SSE4_2;
    f.fma = c & bit_FMA;
    f.avx = c & bit_AVX;
    f.f16c = c & bit_F16C;
  }
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = b & bit_AVX2;
    f.avx512f = b & bit_AVX512F;
    f.avx512bw = b & bit_AVX512BW;
    f.avx512vl = b & bit_AVX512VL;
    f.avx512_vnni = c & (1u << 11);
    f.avx512_fp16 = d & (1u << 23);
    f.amx_bf16 = d & (1u << 22);
    f.amx_tile = d & (1u << 24);
    f.amx_int8 = d & (1u << 25);
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
    f.avx_vnni = a & (1u << 4);
    f.avx512_bf16 = a & (1u << 5);
  }
  // The kernel may hide what it does not manage (AVX-512 state off): the OS-enabled view wins where it says no.
  if (!__builtin_cpu_supports("avx2")) f.avx2 = false;
  if (!__builtin_cpu_supports("avx512f")) f.avx512f = f.avx512bw = f.avx512vl = f.avx512_vnni = f.avx512_bf16 = false;
#endif
  if (extension_hidden("avx_vnni")) f.avx_vnni = false;
  if (extension_hidden("avx512_vnni")) f.avx512_vnni = false;
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) f.model = line.substr(line.find_first_not_of(' ', colon + 1));
      break;
    }
  }
  std::error_code ec;
  const std::filesystem::path base = "/sys/devices/system/cpu/cpu0/cache";
  for (int i = 0; i < 8; ++i) {
    const auto dir = base / ("index" + std::to_string(i));
    if (!std::filesystem::exists(dir, ec)) break;
    CacheLevel level;
    level.level = std::atoi(read_line(dir / "level").c_str());
    level.type = read_line(dir / "type");
    level.bytes = size_of(read_line(dir / "size"));
    level.shared_cpus = read_line(dir / "shared_cpu_list");
    f.caches.push_back(level);
  }
#if defined(__x86_64__) || defined(__i386__)
  if (f.caches.empty()) {  // a VM without sysfs cache entries: the CPU's own descriptors
    const unsigned max_extended = __get_cpuid_max(0x80000000u, nullptr);
    if (f.vendor == "GenuineIntel" && max_leaf >= 4) {
      f.caches = cpuid_caches(4);
    } else if (f.vendor == "AuthenticAMD" && max_extended >= 0x8000001Du) {
      unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
      __cpuid(0x80000001u, a1, b1, c1, d1);
      if (c1 & (1u << 22)) f.caches = cpuid_caches(0x8000001Du);  // TopologyExtensions: the leaf is there
    }
    if (f.caches.empty() && max_extended >= 0x80000006u) {
      // The older extended descriptors, which VMs that hide the others still pass: L2 in KB (0x80000006, Intel and
      // AMD); on AMD also L1 in KB (0x80000005) and L3 in 512 KB units.
      const bool amd = f.vendor == "AuthenticAMD";
      unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
      __cpuid(0x80000005u, a1, b1, c1, d1);
      if (amd && (c1 >> 24)) f.caches.push_back({1, "Data", uint64_t(c1 >> 24) << 10, ""});
      if (amd && (d1 >> 24)) f.caches.push_back({1, "Instruction", uint64_t(d1 >> 24) << 10, ""});
      __cpuid(0x80000006u, a1, b1, c1, d1);
      if (c1 >> 16) f.caches.push_back({2, "Unified", uint64_t(c1 >> 16) << 10, ""});
      if (amd && (d1 >> 18)) f.caches.push_back({3, "Unified", uint64_t(d1 >> 18) << 19, ""});
    }
  }
#endif
  return f;
}

std::string CpuFeatures::microarchitecture() const {
  if (vendor != "AuthenticAMD") return "";
  switch (family) {
    case 0x17: return "AMD Zen, Zen+ or Zen 2";
    case 0x19: return avx512f ? "AMD Zen 4" : "AMD Zen 3";
    case 0x1a: return "AMD Zen 5";
    default: return "";
  }
}

std::vector<std::string> CpuFeatures::names() const {
  std::vector<std::string> out;
  const std::pair<bool, const char*> all[] = {
      {sse42, "sse4.2"},           {avx, "avx"},           {avx2, "avx2"},         {fma, "fma"},
      {f16c, "f16c"},              {avx512f, "avx512f"},   {avx512bw, "avx512bw"}, {avx512vl, "avx512vl"},
      {avx512_vnni, "avx512_vnni"}, {avx512_bf16, "avx512_bf16"}, {avx512_fp16, "avx512_fp16"},
      {avx_vnni, "avx_vnni"},      {amx_tile, "amx_tile"}, {amx_bf16, "amx_bf16"}, {amx_int8, "amx_int8"}};
  for (const auto& [present, name] : all)
    if (present) out.emplace_back(name);
  return out;
}

}  // namespace actord::cpu
