#!/usr/bin/env bash
# Prefill/decode disaggregation against colocated replicas and llama.cpp's llama-server, side by side in one run,
# alternating ROUNDS times, every server on the same 2 cores: actord with configs/pd.yaml (one prefill and one
# decode worker process of THREADS threads each), actord with configs/dp2.yaml (two replicas that both prefill and
# decode, THREADS threads each), and llama-server (-t 2, SLOTS slots) on a GGUF of the same weights. Each is loaded
# by `actord bench serve` with Poisson arrivals (RATE requests/s) of random prompts of INPUT tokens (+-50%) and
# OUTPUT tokens each: the decoding sequences meet long prompts arriving, which a colocated replica computes in the
# steps they decode in. Prints per server and round: output tok/s, TTFT p50 / p99 and ITL p50 / p90 / p99 / p99.9 /
# max (ms), as the clients saw them.
# SERVERS (default "pd dp2 llama") picks which run.
# Usage: [ROUNDS=2] [RATE=1.5] [NUM=48] [INPUT=512] [OUTPUT=64] [THREADS=1] [SLOTS=8] \
#        bench/compare_disaggregation.sh MODEL GGUF LLAMA_CPP_BIN_DIR [ACTORD]
set -euo pipefail
model=$1 gguf=$2 bin=$3 actord=${4:-build/actord}
rounds=${ROUNDS:-2} rate=${RATE:-1.5} num=${NUM:-48} input=${INPUT:-512} output=${OUTPUT:-64}
threads=${THREADS:-1} slots=${SLOTS:-8}
configs=$(dirname "$0")/../configs
log=/tmp/compare_disaggregation.$$
source "$(dirname "$0")/serve_lib.sh"
trap stop EXIT
load() {  # $1: label
  bench_serve_json |
    python3 -c 'import json, sys
j = json.load(sys.stdin)
t, i = j["ttft_ms"], j["itl_ms"]
print("round %s %-26s output %6.1f tok/s  TTFT p50 %7.1f p99 %7.1f ms  ITL p50 %5.1f p90 %5.1f p99 %6.1f p99.9 %6.1f max %6.1f ms"
      % (sys.argv[1], sys.argv[2], j["output_tokens_per_s"], t["median"], t["p99"], i["median"], i["p90"], i["p99"],
         i["p999"], i["max"]))' "$round" "$1"
}
actord_server() {  # $1: config, $2: label, $3: its groups' indices
  local sets=(--set "engine.kv_cache_memory=512MiB" --set "engine.max_num_seqs=64")
  for g in $3; do sets+=(--set "groups[$g].threads=$threads"); done
  "$actord" serve "$configs/$1" --model "$model" --port "$port" "${sets[@]}" >"$log.server" 2>&1 &
  pid=$!
  wait_up
  load "$2"
  stop
}
echo "$(basename "$model"): ${rate} req/s, $num prompts of $input (+-50%) tokens, $output out; actord $threads thread(s) per worker, llama-server -t 2 -np $slots"
for round in $(seq "$rounds"); do
  for server in ${SERVERS:-pd dp2 llama}; do
    case $server in
      pd) actord_server pd.yaml "actord pd (1 prefill+1 decode)" "0 1" ;;
      dp2) actord_server dp2.yaml "actord dp2 (colocated)" 0 ;;
      llama)
        LD_LIBRARY_PATH="$bin" "$bin/llama-server" -m "$gguf" -t 2 -np "$slots" \
          -c $((slots * (input * 3 / 2 + output + 16))) --port "$port" >"$log.server" 2>&1 &
        pid=$!
        wait_up
        load "llama-server (-np $slots)"
        stop ;;
    esac
  done
done
rm -f "$log.server"
