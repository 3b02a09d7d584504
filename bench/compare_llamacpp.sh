#!/usr/bin/env bash
# Side by side in one run, alternating the two engines ROUNDS times: llama-batched-bench on a GGUF file and actord
# bench offline on MODEL (an HF folder with the same weights, or the same GGUF file), prompt 128, 64 generated
# tokens, NPL sequences at once (default 1 8 32), 2 threads. ACTORD_SET adds --set overrides to actord (e.g.
# "model.quantization=int8"). Prints one line per engine, round and sequence count: prefill and decode tokens/s.
# Usage: [NPL="1 8 32"] [ROUNDS=3] [ACTORD_SET="k=v ..."] bench/compare_llamacpp.sh MODEL GGUF LLAMA_CPP_BIN_DIR [ACTORD]
set -euo pipefail
model=$1 gguf=$2 bin=$3 actord=${4:-build/actord}
npl=${NPL:-1 8 32}
rounds=${ROUNDS:-3}
max_npl=$(echo $npl | tr ' ' '\n' | sort -n | tail -1)
context=$((max_npl * 192 > 8192 ? max_npl * 192 : 8192))
sets=()
for kv in ${ACTORD_SET:-}; do sets+=(--set "$kv"); done
echo "llama.cpp: $(basename "$gguf") | actord: $model ${ACTORD_SET:-} | prompt 128, generated 64, 2 threads"
for round in $(seq "$rounds"); do
  "$bin/llama-batched-bench" -m "$gguf" -npp 128 -ntg 64 -npl "${npl// /,}" -t 2 -c "$context" 2>/dev/null |
    awk -v r="$round" -F'|' '/^\|[ ]+128/ { printf "round %d llama.cpp npl %3d  S_PP %8.1f  S_TG %8.1f\n", r, $4, $7, $9 }'
  for c in $npl; do
    "$actord" bench offline --model "$model" --num-prompts "$c" --input-len 128 --output-len 64 --concurrency "$c" \
      --threads 2 --set engine.kv_cache_memory=512MiB "${sets[@]}" --json 2>/dev/null |
      python3 -c 'import json,sys; j=json.load(sys.stdin); print("round %s actord    npl %3d  S_PP %8.1f  S_TG %8.1f" % (sys.argv[1], j["concurrency"], j["prefill_tokens_per_s"], j["decode_tokens_per_s"]))' "$round"
  done
done
