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
# SCHEMA=FILE adds a JSON schema as a fourth constraint (llama.cpp --json-schema-file, which it turns into a GBNF
# grammar; actord response_format json_schema), up to SCHEMA_GEN (256) tokens: each engine's text ends where its
# object closes, and both are
# validated by the jsonschema package with formats asserted (tests/reference/validate_json_schema.py).
# Usage: [ROUNDS=3] [GEN=64] [PROMPT="..."] [ACTORD_SET="k=v ..."] [SCHEMA=FILE] bench/compare_guided.sh MODEL GGUF
#        LLAMA_CPP_BIN_DIR [ACTORD]
set -euo pipefail
model=$1 gguf=$2 bin=$3 actord=${4:-build/actord}
rounds=${ROUNDS:-3} gen=${GEN:-64}
prompt=${PROMPT:-Once upon a time}
config=$(dirname "$0")/../configs/quickstart.yaml
names=(none loop counted)
grammars=("" 'root ::= [a-z ,]* "~"' 'root ::= [a-z ,]{1000}')
regexes=("" '[a-z ,]*~' '[a-z ,]{1000}')
schema=${SCHEMA:-} schema_gen=${SCHEMA_GEN:-256}
peer_runs=(0 1 2) actord_runs=(0 1 2 3 4)
[ -n "$schema" ] && peer_runs+=(3) actord_runs+=(5) names+=(schema)
log=/tmp/compare_guided.$$.log
sets=()
for kv in ${ACTORD_SET:-}; do sets+=(--set "$kv"); done
echo "llama.cpp: llama-completion $(basename "$gguf") | actord: generate $model ${ACTORD_SET:-} | $gen greedy tokens, 2 threads"
for round in $(seq "$rounds"); do
  for i in "${peer_runs[@]}"; do
    args=(-m "$gguf" -p "$prompt" -n "$([ "$i" -eq 3 ] && echo "$schema_gen" || echo "$gen")" -t 2 --temp 0 -no-cnv)
    if [ "$i" -eq 3 ]; then
      args+=(--json-schema-file "$schema")  # the object ends the text: no --ignore-eos
    else
      args+=(--ignore-eos)
      [ -n "${grammars[$i]}" ] && args+=(--grammar "${grammars[$i]}")
    fi
    LD_LIBRARY_PATH="$bin" "$bin/llama-completion" "${args[@]}" 2>"$log" </dev/null |
      python3 -c 'import sys; t = sys.stdin.read(); t = t[t.find(sys.argv[1]) + len(sys.argv[1]):].rstrip("\n")
sys.stdout.write(t[:-len(" [end of text]")] if t.endswith(" [end of text]") else t)' "$prompt" >"$log.text$i"
    awk -v r="$round" -v n="${names[$i]}" -v c="$(wc -m <"$log.text$i")" '
      /sampling time/ { for (i = 1; i <= NF; ++i) if ($i == "=") s = $(i + 1) }
      / eval time/ && !/prompt/ { for (i = 1; i <= NF; ++i) { if ($i == "=") e = $(i + 1); if ($i == "runs") k = $(i - 1) } }
      END { printf "round %d llama.cpp %-12s decode %7.1f tok/s  (sampling %6.1f ms)  text %d characters\n", r, n,
                   1000 * k / (e + s), s, c }' "$log"
  done
  for run in "${actord_runs[@]}"; do  # none, then each constraint as a regex and as the GBNF grammar; the schema
    i=$(( run < 3 ? run : run < 5 ? run - 2 : 3 ))
    args=(generate "$config" --model "$model" --prompt "$prompt" --max-tokens "$([ "$run" -eq 5 ] && echo "$schema_gen" || echo "$gen")"
          --temperature 0 --json
          --set 'groups[0].threads=2' "${sets[@]}")
    name=${names[$i]}
    if [ "$run" -eq 0 ]; then
      args+=(--ignore-eos)
    elif [ "$run" -eq 5 ]; then
      args+=(--response-format json_schema --json-schema "$schema")
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
      sys.argv[2], j["decode_tokens_per_s"], "", len(t), common))
open(sys.argv[3] + ".actord", "w", encoding="utf-8").write(t)' "$round" "$name" "$log.text$i"
  done
  if [ -n "$schema" ]; then  # both objects, judged by the jsonschema package
    python3 -c 'import json, sys
texts = [open(f, encoding="utf-8").read() for f in sys.argv[2:]]
json.dump([{"schema": json.load(open(sys.argv[1], encoding="utf-8")), "documents": texts}], sys.stdout)' \
      "$schema" "$log.text3" "$log.text3.actord" >"$log.cases"
    echo "round $round schema texts (llama.cpp's, actord's) by the jsonschema package: $(
      python3 "$(dirname "$0")/../tests/reference/validate_json_schema.py" "$log.cases" | tr '\n' ' ')"
  fi
done
rm -f "$log" "$log".text* "$log.gbnf" "$log.cases"
