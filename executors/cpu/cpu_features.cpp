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
  if (__get_cpuid(1, &a, &b, &c, &d)) {
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
  return f;
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
