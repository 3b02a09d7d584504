// The paged attention kernel (attention_impl.inl) compiled for 16-wide AVX-512 (F, BW) with FMA; attention.cpp calls it
// only when the CPU has those features.
#define ACTORD_ATTENTION_NS attention_avx512
#include "executors/cpu/attention_impl.inl"
