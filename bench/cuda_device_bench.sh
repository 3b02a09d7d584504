#!/usr/bin/env bash
# Issue 12's device benchmarks in one call: a Llama-3-8B-shaped model with random bf16 weights (load_format: dummy)
# through `actord bench offline` on the GPU, beside the GPU's own limits (bench/gpu_limits.py: copy bandwidth, the
# cuBLAS bf16 GEMM rate) and HF transformers + PyTorch on the same shape (bench/hf_generate_bench.py), all measured
# in this run. Prints a summary and writes every raw JSON under OUT:
#   decode MBU at batch 1 = weight bytes / step time / copy bandwidth, the copy's bytes read plus bytes written (the
#   memory traffic it sustains; goal: 75% or more)
#   output and decode tokens/s at batch 1, 64 and 256 (prompts of 128, 64 generated, greedy), actord vs HF
#   prefill TFLOP/s of one 4096-token prompt (2 x parameters x tokens + the causal attention's 2 x 2 x layers x
#   hidden x tokens^2 / 2) against the 8192^3 bf16 GEMM rate
# Usage: bench/cuda_device_bench.sh [--device cuda|cpu] [--shape 8b|tiny] [--out DIR] [--actord BIN] [--quick]
#                                   [--deadline SECONDS] [--only "NAMES"]
#   --only: just these runs (the GPU's limits always): b1 b64 b256 prefill profile_b1 profile_b64 profile_prefill
#   graphs early ahead clock hf long_b1 sampled profile_sampled fallbacks, e.g. --only "b1 profile_b1 hf" for a short lease.
#   --shape tiny --device cpu: a smoke run of the script itself on a machine without a GPU (PyTorch parts skipped
#   where torch, CUDA or transformers are missing). Each step is bounded by `timeout`; a failed step is reported and
#   the others still run.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEVICE=cuda SHAPE=8b OUT="${OUT:-/tmp/actord-device-bench}" ACTORD="${ACTORD_BINARY:-$ROOT/build/actord}" QUICK=""
DEADLINE=0 ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --shape) SHAPE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --actord) ACTORD="$2"; shift 2 ;;
    --quick) QUICK=--quick; shift ;;
    --deadline) DEADLINE="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    *) echo "cuda_device_bench: unknown argument $1" >&2; exit 2 ;;
  esac
done
PY="${PYTHON:-python3}"
export ACTORD_CUDA_REPORT=1  # each run's stderr ends with its step graphs' replays and captures
mkdir -p "$OUT"
MODEL="$OUT/model-$SHAPE"
case "$SHAPE" in
  8b) SHAPE_ARGS="--hidden 4096 --layers 32 --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 --ctx 8192 --rope-theta 500000"
      KV=16GiB ;;
  tiny) SHAPE_ARGS="--hidden 256 --layers 4 --heads 4 --kv-heads 2 --ffn 512 --vocab 4096 --ctx 8192"
        KV=512MiB ;;
  *) echo "cuda_device_bench: --shape 8b or tiny" >&2; exit 2 ;;
esac
BATCHES="1 64 256"
[ -n "$QUICK" ] && BATCHES="1 64"
"$PY" "$ROOT/bench/make_dummy_llama.py" "$MODEL" $SHAPE_ARGS --no-weights >/dev/null || exit 1
cat >"$OUT/topology.yaml" <<YAML
model: {path: $MODEL, load_format: dummy}
engine: {max_num_seqs: 256, max_num_batched_tokens: 8192, kv_cache_memory: $KV}
groups: [{name: main, device: $DEVICE}]
YAML

step() {  # name, seconds, command...: runs it, its stdout to OUT/name.json, says how it went
  local name="$1" limit="$2"; shift 2
  local t0=$SECONDS
  if [ "$DEADLINE" -gt 0 ]; then
    local left=$((DEADLINE - SECONDS - 10))
    if [ "$left" -lt 20 ]; then echo "  $name: skipped (deadline)"; return; fi
    [ "$left" -lt "$limit" ] && limit=$left
  fi
  timeout "$limit" "$@" >"$OUT/$name.json" 2>"$OUT/$name.err"
  local rc=$?
  echo "  $name: exit $rc in $((SECONDS - t0)) s$([ $rc -ne 0 ] && echo " ($(tail -c 300 "$OUT/$name.err" | tr '\n' ' '))")"
}
echo "cuda_device_bench: $SHAPE on $DEVICE, logs in $OUT"
if [ "$DEVICE" = cuda ]; then
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null
  step limits 120 "$PY" "$ROOT/bench/gpu_limits.py" $QUICK
fi
# One `actord bench offline` on the model: name, seconds, input length, output length, prompts (= concurrency).
actord_run() {  # ... then any further options of bench offline
  local name="$1" limit="$2" input="$3" output="$4" prompts="$5"
  shift 5
  step "$name" "$limit" "$ACTORD" bench offline --config "$OUT/topology.yaml" --model "$MODEL" --load-format dummy \
    --input-len "$input" --output-len "$output" --num-prompts "$prompts" --concurrency "$prompts" --json "$@"
}
wanted() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; }
actord_batch() { wanted "b$1" && actord_run "actord_b$1" 420 128 64 "$1"; }
actord_prefill() { actord_run "$1" 300 4096 1 1; }
# GPU time per backend primitive (ACTORD_CUDA_PROFILE=1: executors/cuda/kernel_times.hpp) of a short run at batch b.
actord_profile() {
  wanted "profile_b$1" || return 0
  ACTORD_CUDA_PROFILE=1 actord_run "actord_profile_b$1" 300 128 16 "$1"
  grep 'cuda profile' "$OUT/actord_profile_b$1.err" | head -16
}
# The most wanted first, so that a deadline cuts the least: batch 1 (MBU) and where its time goes, the prefill, the
# larger batches, graphs against launch by launch, the peer, then the profiles, paths and fallbacks.
actord_batch 1
[ "$DEVICE" = cuda ] && actord_profile 1
wanted prefill && actord_prefill actord_prefill
for b in $BATCHES; do
  [ "$b" = 1 ] || actord_batch "$b"
done
# Decode steps launch by launch against CUDA graphs (ACTORD_CUDA_DISABLE=step_graphs) at batch 1 and 64.
if [ "$DEVICE" = cuda ] && wanted graphs; then
  ACTORD_CUDA_DISABLE=step_graphs actord_run actord_b1_no_graphs 420 128 64 1
  ACTORD_CUDA_DISABLE=step_graphs actord_run actord_b64_no_graphs 420 128 64 64
  for run in actord_b1 actord_b64 actord_b256; do
    echo "  $run: $(grep -h 'step graphs' "$OUT/$run.err" 2>/dev/null | tail -1)"
  done
fi
# Small-batch products launched early (ACTORD_CUDA_ENABLE=early_launch: streaming their first weights while the
# kernel before them runs; off by default until validated) against the default launch after it, at batch 1 and 64.
if [ "$DEVICE" = cuda ] && wanted early; then
  ACTORD_CUDA_ENABLE=early_launch actord_run actord_b1_early 420 128 64 1
  ACTORD_CUDA_ENABLE=early_launch actord_run actord_b64_early 420 128 64 64
fi
# Each step queued behind the one before, its tokens read after (WorkerCore::step: the device never waits for the
# host between steps) against one step at a time (ACTORD_CUDA_DISABLE=run_ahead), at AHEAD_BATCHES (1 64 256).
if [ "$DEVICE" = cuda ] && wanted ahead; then
  for b in ${AHEAD_BATCHES:-1 64 256}; do
    ACTORD_CUDA_DISABLE=run_ahead actord_run "actord_b${b}_no_ahead" 420 128 64 "$b"
  done
fi
# How the scheduler books each step's share of the wall clock at batch 64 (--log-level trace: one line a step), for
# the bench's decode tokens/s that disagree with the clients' time per output token under running ahead.
if wanted clock; then
  actord_run actord_b64_clock 420 128 64 64 --log-level trace
  grep -h 'booked' "$OUT/actord_b64_clock.err" | sed 's/^.*scheduler: //' | head -24
fi
# The peer, right after the runs it is compared with (the issue asks for both in one call); the profiles, paths and
# fallbacks after it are what a deadline cuts first.
if ! wanted hf; then
  :
elif "$PY" -c "import torch, transformers" 2>/dev/null; then
  step hf 600 "$PY" "$ROOT/bench/hf_generate_bench.py" "$MODEL" --batches "$(echo $BATCHES | tr ' ' ,)" \
    --device "$DEVICE"
else
  echo "  hf: skipped (no torch + transformers for $PY)"
fi
[ "$DEVICE" = cuda ] && actord_profile 64
if [ "$DEVICE" = cuda ] && wanted profile_prefill; then  # where the 4k prefill's time goes
  ACTORD_CUDA_PROFILE=1 actord_prefill actord_profile_prefill
  grep "cuda profile" "$OUT/actord_profile_prefill.err" | head -28
fi
# Batch-1 decode at a 4k context (split-K decode attention: every decode there is cut into splits).
if [ "$DEVICE" = cuda ] && wanted long_b1; then actord_run actord_long_b1 420 4000 64 1; fi
# Sampled decoding (temperature 0.8, top-k 50, top-p 0.95: HF generate's top-k default) at SAMPLED_BATCHES (default
# 64 and 256): the tokens drawn on the GPU, then the logits downloaded and drawn by the worker's CPU sampler
# (ACTORD_CUDA_DISABLE=device_sampling), and drawn on the GPU one step at a time (ACTORD_CUDA_DISABLE=run_ahead: the
# default runs sampled steps ahead once the device sampler's checked calls agreed). Without top-k, this random
# model's rows are nearly flat: top-p 0.95 then holds most of the vocabulary, more than the GPU's candidate lists,
# and the kernel draws those rows by searches over the whole vocabulary (~50 passes over each row).
if [ "$DEVICE" = cuda ] && wanted sampled; then
  sampled_run() {  # name, batch
    actord_run "$1" 420 128 64 "$2" --temperature 0.8 --top-k 50 --top-p 0.95
  }
  for b in ${SAMPLED_BATCHES:-64 256}; do
    sampled_run "actord_sampled_b$b" "$b"
    ACTORD_CUDA_DISABLE=device_sampling sampled_run "actord_sampled_host_b$b" "$b"
    ACTORD_CUDA_DISABLE=run_ahead sampled_run "actord_sampled_no_ahead_b$b" "$b"
  done
fi
# Where a sampled batch-256 step's time goes (greedy steps of that batch take ~7 ms less on an H200).
if [ "$DEVICE" = cuda ] && wanted profile_sampled; then
  ACTORD_CUDA_PROFILE=1 actord_run actord_profile_sampled_b256 300 128 16 256 --temperature 0.8 --top-k 50 --top-p 0.95
  grep 'cuda profile' "$OUT/actord_profile_sampled_b256.err" | head -16
fi
# Paths against their fallbacks in the same run (ACTORD_CUDA_DISABLE, executors/cuda/cuda_backend.cu): batch 1 with
# cuBLAS for every product, the 4k prefill's attention through cuBLAS (S and P in memory) instead of the flash
# kernel, and on the FMA tiles.
if [ "$DEVICE" = cuda ] && wanted fallbacks; then
  ACTORD_CUDA_DISABLE=small_batch actord_run actord_b1_cublas 420 128 64 1
  ACTORD_CUDA_DISABLE=flash_prefill actord_prefill actord_prefill_cublas_attention
  ACTORD_CUDA_DISABLE=flash_prefill,long_prefill actord_prefill actord_prefill_fma_tiles
fi
# A checked path that turned itself off in any run says so on stderr (its first use differed from its fallback).
if grep -h -E "cuda:[0-9]+: .*off" "$OUT"/*.err 2>/dev/null | sort -u | grep .; then
  echo "  (paths above turned off: their runs measured the fallback)"
fi

"$PY" - "$OUT" "$MODEL/config.json" "$BATCHES" <<'PY'
import json, os, sys
out, config_path, batches = sys.argv[1], sys.argv[2], [int(b) for b in sys.argv[3].split()]
cfg = json.load(open(config_path))
def load(name):
    try:
        return json.load(open(os.path.join(out, name + ".json")))
    except Exception:
        return None
h, L, V, ff = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"], cfg["intermediate_size"]
kv = cfg["num_key_value_heads"] * (h // cfg["num_attention_heads"])
per_layer = h * (h + 2 * kv) + h * h + 3 * h * ff
params = L * per_layer + 2 * V * h  # untied embedding and lm_head
streamed = (L * per_layer + V * h) * 2  # bf16 bytes a decode step reads (the embedding only by rows)
summary = {"params": params, "weight_bytes_per_step": streamed}
limits = load("limits") or {}
summary["limits"] = limits
rows = []
for b in batches:
    a, hf = load(f"actord_b{b}"), load("hf")
    hf_run = next((r for r in (hf or {}).get("generate", []) if r["batch"] == b), None)
    row = {"batch": b,
           "actord_output_tok_s": a and a.get("output_tokens_per_s"),
           "actord_decode_tok_s": a and a.get("decode_tokens_per_s"),
           "hf_output_tok_s": hf_run and hf_run["output_tok_s"],
           "hf_decode_tok_s": hf_run and hf_run["decode_tok_s"]}
    if b == 1 and a and a.get("decode_tokens_per_s") and limits.get("copy_rw_gb_s"):
        step_s = 1.0 / a["decode_tokens_per_s"]
        row["weight_gb_s"] = round(streamed / step_s / 1e9, 1)
        row["mbu"] = round(streamed / step_s / 1e9 / limits["copy_rw_gb_s"], 3)
    rows.append(row)
summary["decode"] = rows
p = load("actord_prefill")
tokens = 4096
flops_per_token = 2 * (L * per_layer + V * h) + 2 * 2 * L * h * tokens / 2
if p and p.get("prefill_tokens_per_s"):
    tf = p["prefill_tokens_per_s"] * flops_per_token / 1e12
    summary["prefill"] = {"actord_tok_s": p["prefill_tokens_per_s"], "actord_tflops": round(tf, 1)}
    gemm = limits.get("gemm_tflops", {}).get("8192x8192x8192")
    if gemm:
        summary["prefill"]["share_of_gemm_rate"] = round(tf / gemm, 3)
ab = {}
for name, key in (("actord_b1", "decode_tokens_per_s"), ("actord_b1_cublas", "decode_tokens_per_s"),
                  ("actord_b1_no_graphs", "decode_tokens_per_s"), ("actord_b64", "decode_tokens_per_s"),
                  ("actord_b64_no_graphs", "decode_tokens_per_s"), ("actord_b1_no_ahead", "decode_tokens_per_s"),
                  ("actord_b64_no_ahead", "decode_tokens_per_s"), ("actord_b256", "decode_tokens_per_s"),
                  ("actord_b256_no_ahead", "decode_tokens_per_s"), ("actord_prefill", "prefill_tokens_per_s"),
                  ("actord_prefill_cublas_attention", "prefill_tokens_per_s"),
                  ("actord_prefill_fma_tiles", "prefill_tokens_per_s"),
                  ("actord_long_b1", "decode_tokens_per_s"), ("actord_sampled_b64", "decode_tokens_per_s"), ("actord_sampled_host_b64", "decode_tokens_per_s"),
                  ("actord_sampled_no_ahead_b64", "decode_tokens_per_s"), ("actord_sampled_b256", "decode_tokens_per_s"),
                  ("actord_sampled_no_ahead_b256", "decode_tokens_per_s"),
                  ("actord_sampled_host_b256", "decode_tokens_per_s"),
                  ("actord_b1_early", "decode_tokens_per_s"), ("actord_b64_early", "decode_tokens_per_s")):
    run = load(name)
    if run and run.get(key):
        ab[name] = round(run[key], 1)
summary["paths_vs_fallbacks"] = ab
# The clients' view of every run: the median time between a request's output tokens, and the batch's tokens/s at
# that pace, beside the scheduler's decode tokens/s above (each step's wall time up to when it was done: a step run
# ahead is answered a step late, StepResult.answeredLateMicros).
pace = {}
for name in sorted(f[:-5] for f in os.listdir(out) if f.startswith("actord_") and f.endswith(".json")):
    run = load(name)
    tpot = run and (run.get("tpot_ms") or {}).get("p50")
    if tpot and run.get("concurrency"):
        pace[name] = {"tpot_ms": round(tpot, 3), "tok_s": round(run["concurrency"] * 1000.0 / tpot, 1)}
summary["time_per_output_token"] = pace
hf = load("hf")
if hf and hf.get("prefill"):
    summary.setdefault("prefill", {})["hf_tok_s"] = hf["prefill"]["tok_s"]
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(json.dumps(summary, indent=1))
PY
