// The paged attention kernel (attention_impl.inl) compiled for 8-wide AVX2 with FMA and F16C; attention.cpp calls it
// only when the CPU has those features.
#define ACTORD_ATTENTION_NS attention_avx2
#include "executors/cpu/attention_impl.inl"
