#!/usr/bin/env python3
"""The peer of bench/cuda_device_bench.sh: HF transformers + PyTorch on the same model shape, on the GPU.

Builds the model of CONFIG_DIR/config.json with random bf16 weights made on the GPU (no checkpoint: actord's
`load_format: dummy` is random too, so both read weights of the same shapes and dtype; the values do not change
the speed), then
  - decode: for each batch B, B random prompts of --input-len tokens, model.generate(max_new_tokens=--output-len,
    min_new_tokens=--output-len, greedy, KV cache) timed whole; output tok/s = B * output-len / time, and the
    decode rate B * (output-len - 1) / (time - the prefill's own time) as actord's bench reports S_TG
  - prefill: one forward of a --prefill-len token prompt (logits of the last position only), timed
Prints one JSON object. Usage:
  python3 bench/hf_generate_bench.py CONFIG_DIR [--batches 1,64,256] [--input-len 128] [--output-len 64]
         [--prefill-len 4096] [--device cuda]
"""
import argparse
import json
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config_dir")
    ap.add_argument("--batches", default="1,64,256")
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--prefill-len", type=int, default=4096)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()

    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(args.config_dir)
    dev = torch.device(args.device)
    torch.manual_seed(0)
    with dev:
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)  # transformers 5
        except TypeError:
            model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    model.eval()
    out = {"transformers": transformers.__version__, "torch": torch.__version__, "device": args.device,
           "params": sum(p.numel() for p in model.parameters())}
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def prefill_seconds(batch, length):
        ids = torch.randint(3, config.vocab_size, (batch, length), device=dev)
        with torch.no_grad():
            model(ids, logits_to_keep=1)  # warm-up
            sync()
            t0 = time.perf_counter()
            model(ids, logits_to_keep=1)
            sync()
        return time.perf_counter() - t0

    runs = []
    for b in [int(x) for x in args.batches.split(",") if x]:
        ids = torch.randint(3, config.vocab_size, (b, args.input_len), device=dev)
        mask = torch.ones_like(ids)
        gen = dict(max_new_tokens=args.output_len, min_new_tokens=args.output_len, do_sample=False,
                   pad_token_id=0, use_cache=True)
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=mask, **dict(gen, max_new_tokens=2, min_new_tokens=2))
            sync()
            t0 = time.perf_counter()
            model.generate(input_ids=ids, attention_mask=mask, **gen)
            sync()
            total = time.perf_counter() - t0
        first = prefill_seconds(b, args.input_len)
        runs.append({"batch": b, "seconds": round(total, 3),
                     "output_tok_s": round(b * args.output_len / total, 1),
                     "decode_tok_s": round(b * (args.output_len - 1) / max(total - first, 1e-9), 1)})
    out["generate"] = runs
    t = prefill_seconds(1, args.prefill_len)
    out["prefill"] = {"tokens": args.prefill_len, "seconds": round(t, 4), "tok_s": round(args.prefill_len / t, 1)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
