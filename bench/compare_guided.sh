#!/usr/bin/env bash
# Constrained decoding's cost, side by side in one run, alternating ROUNDS times: llama.cpp's llama-completion with
# a GBNF grammar (--grammar) and actord generate with the same constraint as a regex (response_format regex) and as
# the same GBNF grammar (response_format grammar), one sequence, greedy, GEN tokens, 2 threads: unconstrained (both ignoring the end of sequence), `[a-z ,]*~` (one
# state of the automaton after the first token: actord's masks come from its cache) and `[a-z ,]{1000}` (a new
# state at every token: each mask a walk of the vocabulary's trie). Neither text may end before GEN tokens, so
# both engines generate them all. Prints one line per engine, round and constraint: decode tok/s (for llama.cpp its
# decode calls and its sampling, which it times apart and where its grammar runs; actord's steps include both),
# llama.cpp's sampling time, and for actord how many characters of its text begin llama.cpp's too (the engines' f16 and bf16
# arithmetic may part at a near-tie of two logits, constrained or not).
# ACTORD_SET adds --set overrides to actord (e.g. "groups[0].cpu_isa=avx2" beside a llama.cpp built for AVX2).
# Usage: [ROUNDS=3] [GEN=64] [PROMPT="..."] [ACTORD_SET="k=v ..."] bench/compare_guided.sh MODEL GGUF LLAMA_CPP_BIN_DIR
#        [ACTORD]
set -euo pipefail
model=$1 gguf=$2 bin=$3 actord=${4:-build/actord}
rounds=${ROUNDS:-3} gen=${GEN:-64}
prompt=${PROMPT:-Once upon a time}
config=$(dirname "$0")/../configs/quickstart.yaml
names=(none loop counted)
grammars=("" 'root ::= [a-z ,]* "~"' 'root ::= [a-z ,]{1000}')
regexes=("" '[a-z ,]*~' '[a-z ,]{1000}')
log=/tmp/compare_guided.$$.log
sets=()
for kv in ${ACTORD_SET:-}; do sets+=(--set "$kv"); done
echo "llama.cpp: llama-completion $(basename "$gguf") | actord: generate $model ${ACTORD_SET:-} | $gen greedy tokens, 2 threads"
for round in $(seq "$rounds"); do
  for i in 0 1 2; do
    args=(-m "$gguf" -p "$prompt" -n "$gen" -t 2 --temp 0 -no-cnv --ignore-eos)
    [ -n "${grammars[$i]}" ] && args+=(--grammar "${grammars[$i]}")
    LD_LIBRARY_PATH="$bin" "$bin/llama-completion" "${args[@]}" 2>"$log" </dev/null |
      python3 -c 'import sys; t = sys.stdin.read(); sys.stdout.write(t[t.find(sys.argv[1]) + len(sys.argv[1]):].rstrip("\n"))' \
        "$prompt" >"$log.text$i"
    awk -v r="$round" -v n="${names[$i]}" -v c="$(wc -m <"$log.text$i")" '
      /sampling time/ { for (i = 1; i <= NF; ++i) if ($i == "=") s = $(i + 1) }
      / eval time/ && !/prompt/ { for (i = 1; i <= NF; ++i) { if ($i == "=") e = $(i + 1); if ($i == "runs") k = $(i - 1) } }
      END { printf "round %d llama.cpp %-12s decode %7.1f tok/s  (sampling %6.1f ms)  text %d characters\n", r, n,
                   1000 * k / (e + s), s, c }' "$log"
  done
  for run in 0 1 2 3 4; do  # none, then each constraint as a regex and as the GBNF grammar
    i=$(( run < 3 ? run : run - 2 ))
    args=(generate "$config" --model "$model" --prompt "$prompt" --max-tokens "$gen" --temperature 0 --json
          --set 'groups[0].threads=2' "${sets[@]}")
    name=${names[$i]}
    if [ "$run" -eq 0 ]; then
      args+=(--ignore-eos)
    elif [ "$run" -lt 3 ]; then
      args+=(--response-format regex --regex "${regexes[$i]}")
    else
      printf '%s\n' "${grammars[$i]}" >"$log.gbnf"
      args+=(--response-format grammar --grammar "$log.gbnf")
      name="$name-gbnf"
    fi
    "$actord" "${args[@]}" 2>/dev/null | python3 -c 'import json, os, sys
j = json.load(sys.stdin); t = j["text"]; peer = open(sys.argv[3], encoding="utf-8").read()
common = len(os.path.commonprefix([t, peer]))
print("round %s actord    %-12s decode %7.1f tok/s  %16s  text %d characters, the first %d as llama.cpp" % (sys.argv[1],
      sys.argv[2], j["decode_tokens_per_s"], "", len(t), common))' "$round" "$name" "$log.text$i"
  done
done
rm -f "$log" "$log".text* "$log.gbnf"
