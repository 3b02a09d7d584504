#!/usr/bin/env python3
"""This GPU's limits, through PyTorch (its matrix products are cuBLAS's): the device-to-device copy bandwidth and
the bf16 GEMM rate, measured the way the decode and prefill figures of bench/cuda_device_bench.sh are compared.

Prints one JSON object:
  copy_gb_s      bytes copied / time for a 4 GiB device-to-device copy (each byte is read and written once)
  copy_rw_gb_s   the same counting bytes read and written: the memory traffic the GPU sustains, the figure a
                 weight-streaming decode step is held to (MBU = weight bytes / step time / copy_rw_gb_s)
  gemm_tflops    {shape: TFLOP/s} of bf16 products (f32 accumulation), best of 10 after 3 warm-ups: 8192^3, and
                 the shapes of a 4096-token prefill of a Llama-3-8B (qkv, o, gate+up, down)

Usage: python3 bench/gpu_limits.py [--quick]. Needs torch with CUDA.
"""
import json
import sys

import torch


def timed(fn, repeats=10, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1000.0)
    return best


def main():
    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device visible to torch"}))
        return 1
    quick = "--quick" in sys.argv
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    n = (1 << 28) if quick else (1 << 30)  # floats: 1 or 4 GiB
    src = torch.empty(n, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    t = timed(lambda: dst.copy_(src))
    out["copy_gb_s"] = round(n * 4 / t / 1e9, 1)
    out["copy_rw_gb_s"] = round(2 * n * 4 / t / 1e9, 1)
    del src, dst
    shapes = {"8192x8192x8192": (8192, 8192, 8192), "prefill4k_qkv": (4096, 4096, 6144),
              "prefill4k_o": (4096, 4096, 4096), "prefill4k_gate_up": (4096, 4096, 28672),
              "prefill4k_down": (4096, 14336, 4096)}
    out["gemm_tflops"] = {}
    for name, (m, k, nn) in shapes.items():
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(k, nn, dtype=torch.bfloat16, device="cuda")
        t = timed(lambda: a @ b, repeats=3 if quick else 10)
        out["gemm_tflops"][name] = round(2 * m * k * nn / t / 1e12, 1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
