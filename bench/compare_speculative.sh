#!/usr/bin/env bash
# Speculative decoding by prompt lookup, side by side in one run, alternating ROUNDS times: llama.cpp's lookup
# decoding (llama-lookup, its n-gram caches, --spec-draft-n-max DRAFTS and 0 for none) on a GGUF file, and
# `actord generate` on MODEL (an HF folder with the same weights, or the same GGUF) with speculative.method ngram
# (num_speculative_tokens DRAFTS) and none. One sequence, greedy, PROMPT as text, GEN tokens, 2 threads. Prints one
# line per engine, round and setting: decode tokens/s, drafts and the share of them kept, and a hash of the
# generated text (the same within each engine with and without drafts).
# Usage: [ROUNDS=3] [GEN=256] [DRAFTS=4] [PROMPT="..."] bench/compare_speculative.sh MODEL GGUF LLAMA_CPP_BIN_DIR [ACTORD]
set -euo pipefail
model=$1 gguf=$2 bin=$3 actord=${4:-build/actord}
rounds=${ROUNDS:-3} gen=${GEN:-256} drafts=${DRAFTS:-4}
prompt=${PROMPT:-Once upon a time, there was a little girl named Lily. She loved to play outside in the park.}
config=$(dirname "$0")/../configs/quickstart.yaml
echo "llama.cpp: llama-lookup $(basename "$gguf") | actord: generate $model | $gen greedy tokens, drafts $drafts, 2 threads"
for round in $(seq "$rounds"); do
  for d in 0 "$drafts"; do
    LD_LIBRARY_PATH="$bin" "$bin/llama-lookup" -m "$gguf" -p "$prompt" -n "$gen" -t 2 --spec-draft-n-max "$d" --temp 0 \
      -c 4096 2>"/tmp/compare_speculative.$$.log" | md5sum | cut -c1-8 >"/tmp/compare_speculative.$$.hash"
    awk -v r="$round" -v d="$d" -v h="$(cat /tmp/compare_speculative.$$.hash)" '
      /decoded/ { for (i = 1; i <= NF; ++i) if ($i == "speed:") s = $(i + 1) }
      /n_drafted/ { n = $NF } /n_accept/ { a = $NF }
      END { printf "round %d llama.cpp drafts %2d  decode %8.1f tok/s  drafted %5d  kept %5.1f%%  text %s\n", r, d, s, n, n ? 100 * a / n : 0, h }' \
      "/tmp/compare_speculative.$$.log"
  done
  for method in none ngram; do
    "$actord" generate "$config" --model "$model" --prompt "$prompt" --max-tokens "$gen" --temperature 0 --json \
      --set 'groups[0].threads=2' --set speculative.method="$method" \
      --set speculative.num_speculative_tokens="$drafts" 2>/dev/null |
      python3 -c 'import hashlib, json, sys
j = json.load(sys.stdin); s = j["scheduler"]; n = s["draft_tokens"]
print("round %s actord    %-9s  decode %8.1f tok/s  drafted %5d  kept %5.1f%%  text %s" % (sys.argv[1], sys.argv[2],
      j["decode_tokens_per_s"], n, 100.0 * s["accepted_draft_tokens"] / n if n else 0,
      hashlib.md5(j["text"].encode()).hexdigest()[:8]))' "$round" "$method"
  done
done
rm -f "/tmp/compare_speculative.$$.log" "/tmp/compare_speculative.$$.hash"
