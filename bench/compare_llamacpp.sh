#!/usr/bin/env bash
# Side by side in one run, alternating the two engines ROUNDS times: llama-batched-bench on a GGUF file and actord
# bench offline on MODEL (an HF folder with the same weights, or the same GGUF file), prompts of PROMPT tokens
# (default 128), GEN generated (default 64), NPL sequences at once (default 1 8 32), 2 threads. ACTORD_SET adds --set
# overrides to actord (e.g. "model.quantization=int8" or "engine.kv_cache_dtype=int8"), LLAMA_ARGS arguments to
# llama-batched-bench (e.g. "-ctk q8_0 -ctv q8_0 -fa on"); KV_MEMORY is actord's engine.kv_cache_memory (default
# 512MiB: raise it for long prompts). Prints one line per engine, round and sequence count: prefill and decode
# tokens/s.
# Usage: [NPL="1 8 32"] [ROUNDS=3] [PROMPT=128] [GEN=64] [KV_MEMORY=512MiB] [ACTORD_SET="k=v ..."] [LLAMA_ARGS="..."]
#        bench/compare_llamacpp.sh MODEL GGUF LLAMA_CPP_BIN_DIR [ACTORD]
set -euo pipefail
model=$1 gguf=$2 bin=$3 actord=${4:-build/actord}
npl=${NPL:-1 8 32}
rounds=${ROUNDS:-3}
prompt=${PROMPT:-128} gen=${GEN:-64}
max_npl=$(echo $npl | tr ' ' '\n' | sort -n | tail -1)
per_seq=$((prompt + gen))
context=$((max_npl * per_seq > 8192 ? max_npl * per_seq : 8192))
kv_memory=${KV_MEMORY:-512MiB}
sets=()
for kv in ${ACTORD_SET:-}; do sets+=(--set "$kv"); done
echo "llama.cpp: $(basename "$gguf") ${LLAMA_ARGS:-} | actord: $model ${ACTORD_SET:-} | prompt $prompt, generated $gen, 2 threads"
for round in $(seq "$rounds"); do
  # shellcheck disable=SC2086
  "$bin/llama-batched-bench" -m "$gguf" -npp "$prompt" -ntg "$gen" -npl "${npl// /,}" -t 2 -c "$context" ${LLAMA_ARGS:-} 2>/dev/null |
    awk -v r="$round" -v p="$prompt" -F'|' '$2 + 0 == p && /^\|/ { printf "round %d llama.cpp npl %3d  S_PP %8.1f  S_TG %8.1f\n", r, $4, $7, $9 }'
  for c in $npl; do
    "$actord" bench offline --model "$model" --num-prompts "$c" --input-len "$prompt" --output-len "$gen" --concurrency "$c" \
      --threads 2 --set engine.kv_cache_memory="$kv_memory" "${sets[@]}" --json 2>/dev/null |
      python3 -c 'import json,sys; j=json.load(sys.stdin); print("round %s actord    npl %3d  S_PP %8.1f  S_TG %8.1f" % (sys.argv[1], j["concurrency"], j["prefill_tokens_per_s"], j["decode_tokens_per_s"]))' "$round"
  done
done
