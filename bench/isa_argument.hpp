// The benches' instruction-set argument (auto, portable, avx2, avx512, avx512_bf16 or amx, as isa_for takes them):
// the ISA that runs for `text` on this CPU, or nothing after printing why not to stderr.
#pragma once

#include <cstdio>
#include <optional>

#include "executors/cpu/gemm.hpp"

namespace actord::bench {

inline std::optional<cpu::Isa> isa_argument(const char* text) {
  auto isa = cpu::isa_for(text, cpu::detected_isa());
  if (isa) return *isa;
  std::fprintf(stderr, "%s\n", isa.error().message.c_str());
  return std::nullopt;
}

}  // namespace actord::bench
