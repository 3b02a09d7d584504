// The paged attention kernel (attention_impl.inl) compiled for the baseline instruction set (SSE2 on x86-64); attention.cpp calls it
// only when the CPU has those features.
#define ACTORD_ATTENTION_NS attention_portable
#include "executors/cpu/attention_impl.inl"
