// What this machine's CPU offers the kernels, read at run time: the instruction set extensions (CPUID), its model
// name (/proc/cpuinfo), vendor, family and model (CPUID), and its caches (sysfs; where a VM hides those, CPUID's
// cache descriptors: leaf 4 on Intel, 0x8000001D on AMD, else 0x80000005 / 0x80000006). For `actord info`
// and for choosing kernels by what is present rather than assumed.
//
// Contract: detect() never fails; what it cannot read is left empty (a model name of "", no caches). x86-64 only:
// elsewhere every extension reads false.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace actord::cpu {

struct CacheLevel {
  int level = 0;           // 1, 2, 3
  std::string type;        // Data, Instruction, Unified
  uint64_t bytes = 0;
  std::string shared_cpus;  // sysfs shared_cpu_list of cpu0's cache, e.g. "0-1"; from CPUID "up to N"
};

struct CpuFeatures {
  std::string model;  // "AMD EPYC 9R14", "Intel(R) Xeon(R) Platinum 8488C"
  bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512_vnni = false, avx512_bf16 = false,
       avx512_fp16 = false;
  bool avx_vnni = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  std::vector<CacheLevel> caches;  // cpu0's, by level
  std::string vendor;              // "GenuineIntel", "AuthenticAMD" (CPUID leaf 0)
  int family = 0, model_number = 0;  // display family and model (CPUID leaf 1, extended fields added)

  // The core's generation where the vendor, family, model and extensions tell it ("AMD Zen 4", "AMD Zen 5"), else "".
  std::string microarchitecture() const;

  // What the CPU offers less the extensions ACTORD_CPU_HIDE names.
  static CpuFeatures detect();
  // The extensions present, by their usual names ("avx2 fma f16c avx512f ...").
  std::vector<std::string> names() const;
};

// Extensions the kernels are to act as if absent, read once from ACTORD_CPU_HIDE (names as names() spells them,
// separated by commas or spaces): to run, test and measure the paths an older CPU takes (a Zen 3's AVX2 without
// VNNI on a CPU with AVX-VNNI). Only hideable_extensions() are honoured; unknown_hidden() lists other names given.
const std::vector<std::string>& hideable_extensions();  // avx_vnni, avx512_vnni
bool extension_hidden(const char* name);
std::vector<std::string> hidden_extensions();
std::vector<std::string> unknown_hidden();

}  // namespace actord::cpu
