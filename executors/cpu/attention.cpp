// Picks the paged attention instance (attention_impl.inl) for the instruction set this CPU runs.
#include "executors/cpu/gemm.hpp"
#include "executors/cpu/kernels.hpp"

namespace actord::cpu {

namespace attention_avx512 {
void paged_attention(const PagedAttentionParams& p);
}
namespace attention_avx2 {
void paged_attention(const PagedAttentionParams& p);
}
namespace attention_portable {
void paged_attention(const PagedAttentionParams& p);
}

void paged_attention(const PagedAttentionParams& p, Isa isa) {
  if (isa == Isa::automatic) isa = detected_isa();
  if (isa == Isa::avx512 && detected_isa() == Isa::avx512) return attention_avx512::paged_attention(p);
  if (isa != Isa::portable && detected_isa() != Isa::portable) return attention_avx2::paged_attention(p);
  attention_portable::paged_attention(p);
}

void paged_attention(const PagedAttentionParams& p) { paged_attention(p, Isa::automatic); }

}  // namespace actord::cpu
