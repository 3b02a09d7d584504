#!/usr/bin/env bash
# One run, side by side: actord bench offline and llama-batched-bench on the same weights (HF bf16 folder for
# actord, its f16 GGUF export for llama.cpp), prompt 128, 64 generated tokens, 1/8/32 sequences (NPL="1 8 32 128"
# for others), 2 threads.
# Usage: [NPL="1 8 32"] bench/compare_llamacpp.sh HF_DIR GGUF LLAMA_CPP_BIN_DIR [ACTORD_BINARY]
set -euo pipefail
hf=$1 gguf=$2 bin=$3 actord=${4:-build/actord}
npl=${NPL:-1 8 32}
max_npl=$(echo $npl | tr ' ' '\n' | sort -n | tail -1)
context=$((max_npl * 192 > 8192 ? max_npl * 192 : 8192))
echo "== llama.cpp (llama-batched-bench -npp 128 -ntg 64 -npl ${npl// /,} -t 2)"
"$bin/llama-batched-bench" -m "$gguf" -npp 128 -ntg 64 -npl "${npl// /,}" -t 2 -c "$context" 2>/dev/null |
  grep -E '^\|' || true
/usr/bin/time -f "llama.cpp peak RSS %M KB" "$bin/llama-batched-bench" -m "$gguf" -npp 128 -ntg 64 -npl 32 -t 2 \
  -c 8192 >/dev/null 2>/tmp/llamacpp-time.txt || true
tail -1 /tmp/llamacpp-time.txt
echo "== actord (bench offline --input-len 128 --output-len 64 --threads 2)"
for c in $npl; do
  "$actord" bench offline --model "$hf" --num-prompts "$c" --input-len 128 --output-len 64 --concurrency "$c" \
    --threads 2 --json |
    python3 -c 'import json,sys; j=json.load(sys.stdin); print("npl %2d  S_PP %7.1f  S_TG %7.1f  output/s %7.1f  peak RSS %6.0f MB" % (j["concurrency"], j["prefill_tokens_per_s"], j["decode_tokens_per_s"], j["output_tokens_per_s"], j["peak_rss_mb"]))'
done
