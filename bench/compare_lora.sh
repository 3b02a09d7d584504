#!/usr/bin/env bash
# A LoRA adapter's cost, side by side in one run, alternating ROUNDS times: llama.cpp (llama-lookup without drafts:
# plain greedy decoding, the adapter applied by its common loader with --lora) on a GGUF base and adapter, and
# `actord generate` on MODEL (an HF folder with the same weights) with `--lora` on the PEFT folder ADAPTER, each
# with and without the adapter. One sequence, greedy, PROMPT as text, GEN tokens, 2 threads. Prints one line per
# engine, round and setting: prompt tokens/s, decode tokens/s, and a hash of the generated text.
# Make the GGUF adapter with bench/hf_to_gguf.py MODEL OUT.gguf --lora ADAPTER.
# Usage: [ROUNDS=3] [GEN=128] [PROMPT="..."] bench/compare_lora.sh MODEL ADAPTER GGUF GGUF_ADAPTER LLAMA_CPP_BIN_DIR [ACTORD]
set -euo pipefail
model=$1 adapter=$2 gguf=$3 gguf_adapter=$4 bin=$5 actord=${6:-build/actord}
rounds=${ROUNDS:-3} gen=${GEN:-128}
sentence="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her dog. "
prompt=${PROMPT:-$sentence$sentence$sentence$sentence$sentence}
config=$(dirname "$0")/../configs/quickstart.yaml
log=/tmp/compare_lora.$$.log
echo "llama.cpp: llama-lookup $(basename "$gguf") [--lora $(basename "$gguf_adapter")] | actord: generate $model [--lora $adapter] | $gen greedy tokens, 2 threads"
for round in $(seq "$rounds"); do
  for with in no yes; do
    lora=()
    [ "$with" = yes ] && lora=(--lora "$gguf_adapter")
    LD_LIBRARY_PATH="$bin" "$bin/llama-lookup" -m "$gguf" "${lora[@]}" -p "$prompt" -n "$gen" -t 2 --spec-draft-n-max 0 \
      --temp 0 -c 4096 2>"$log" | md5sum | cut -c1-8 >"$log.hash"
    awk -v r="$round" -v w="$with" -v h="$(cat "$log.hash")" '
      /encoded/ { for (i = 1; i <= NF; ++i) if ($i == "speed:") p = $(i + 1) }
      /decoded/ { for (i = 1; i <= NF; ++i) if ($i == "speed:") s = $(i + 1) }
      END { printf "round %d llama.cpp lora %-3s  prompt %8.1f tok/s  decode %8.1f tok/s  text %s\n", r, w, p, s, h }' "$log"
  done
  for with in no yes; do
    lora=()
    [ "$with" = yes ] && lora=(--lora "bench=$adapter")
    "$actord" generate "$config" --model "$model" "${lora[@]}" --prompt "$prompt" --max-tokens "$gen" --temperature 0 \
      --ignore-eos --json --set 'groups[0].threads=2' 2>/dev/null |
      python3 -c 'import hashlib, json, sys
j = json.load(sys.stdin)
print("round %s actord    lora %-3s  prompt %8.1f tok/s  decode %8.1f tok/s  text %s" % (sys.argv[1], sys.argv[2],
      len(j["prompt_ids"]) / (j["ttft_ms"] / 1000.0), j["decode_tokens_per_s"],
      hashlib.md5(j["text"].encode()).hexdigest()[:8]))' "$round" "$with"
  done
done
rm -f "$log" "$log.hash"
