// Picks the paged attention instance (attention_impl.inl) for the instruction set this CPU runs.
#include <algorithm>

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
  if ((isa == Isa::avx512 || bf16_dot_products(isa)) && detected_isa() == Isa::avx512)
    return attention_avx512::paged_attention(p);
  if (isa != Isa::portable && detected_isa() != Isa::portable) return attention_avx2::paged_attention(p);
  attention_portable::paged_attention(p);
}

void paged_attention(const PagedAttentionParams& p) { paged_attention(p, Isa::automatic); }

int decode_heads_per_task(int n_heads, int n_kv_heads, int n_seqs, int threads) {
  const int group = n_kv_heads > 0 ? n_heads / n_kv_heads : 1;
  const int seqs = std::max(1, n_seqs);
  int tasks_per_seq = std::clamp((threads + seqs - 1) / seqs, 1, n_heads);
  // More, smaller tasks only while the tasks would not come out even over the threads and are few.
  while (tasks_per_seq < n_heads && seqs * tasks_per_seq % threads != 0 && seqs * tasks_per_seq < 4 * threads)
    ++tasks_per_seq;
  const int heads = (n_heads + tasks_per_seq - 1) / tasks_per_seq;
  return std::min(n_heads, (heads + group - 1) / group * group);
}

}  // namespace actord::cpu
