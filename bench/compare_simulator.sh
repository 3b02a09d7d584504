#!/usr/bin/env bash
# actord simulate against the engine it predicts. For each topology, two cost profiles: `actord calibrate`'s grid
# (each replica shape alone, in-process), and `actord calibrate --from-trace` of an `actord serve --trace` run under
# `actord bench serve` at CAL_RATE on top of it (serving conditions: on a small machine the HTTP server, tokenizers and the load
# generator share the cores with the workers). Then for each request rate `actord serve` runs under `actord bench
# serve` and `actord simulate` predicts the same workload from each profile (same flags and seed: the same prompts
# and Poisson arrivals); one line each, side by side.
# Usage: bench/compare_simulator.sh MODEL_DIR [ACTORD]
# Env: CONFIGS (topologies in configs/, default "quickstart.yaml dp2.yaml pd.yaml"), THREADS (per rank of each group,
# default "2 1 1" for the configs in order), CAL_RATE (1.0), RATES (default "0.5 1.5 3"), NUM (48), INPUT (512),
# OUTPUT (64).
set -euo pipefail
model=$1 actord=${2:-build/actord}
configs_dir=$(dirname "$0")/../configs
read -r -a configs <<<"${CONFIGS:-quickstart.yaml dp2.yaml pd.yaml}"
read -r -a threads <<<"${THREADS:-2 1 1}"
rates=${RATES:-0.5 1.5 3} cal_rate=${CAL_RATE:-1.0} num=${NUM:-48} input=${INPUT:-512} output=${OUTPUT:-64}
log=/tmp/compare_simulator.$$
stop_signal=INT
source "$(dirname "$0")/serve_lib.sh"
profile=$log.grid.json traced=$log.traced.json trace=$log.trace.json
trap 'stop; rm -f "$profile" "$traced" "$trace" "$log.server"' EXIT
summary() {  # $1: label; a bench serve / simulate JSON report on stdin
  python3 -c 'import json, sys
j = json.load(sys.stdin)
t, i = j["ttft_ms"], j["itl_ms"]
print("  %-10s output %6.1f tok/s  TTFT p50 %8.1f p99 %8.1f ms  ITL p50 %6.1f p99 %6.1f ms  E2E p50 %8.1f ms"
      % (sys.argv[1], j["output_tokens_per_s"], t["median"], t["p99"], i["median"], i["p99"], j["e2e_ms"]["median"]))' "$1"
}
workload() { echo --num-prompts "$num" --concurrency "$num" --request-rate "$1" --input-len "$input" \
  --output-len "$output" --random-range-ratio 0.5 --warmup 2 --seed 7 --json; }
for k in "${!configs[@]}"; do
  config=${configs[$k]} t=${threads[$k]:-1}
  sets=(--model "$model" --set "engine.kv_cache_memory=512MiB" --set "engine.max_num_seqs=64")
  for g in 0 1; do
    if grep -q "^  - name:" "$configs_dir/$config" && [ "$(grep -c '^  - name:' "$configs_dir/$config")" -gt "$g" ]; then
      sets+=(--set "groups[$g].threads=$t")
    fi
  done
  start=$(date +%s)
  "$actord" calibrate "$configs_dir/$config" "${sets[@]}" -o "$profile" | sed 's/^/  grid: /'
  echo "  grid calibration: $(($(date +%s) - start)) s"
  "$actord" serve "$configs_dir/$config" "${sets[@]}" --port "$port" --trace "$trace" >"$log.server" 2>&1 &
  pid=$!
  wait_up
  # shellcheck disable=SC2046
  "$actord" bench serve --url "http://127.0.0.1:$port" $(workload "$cal_rate") >/dev/null 2>&1
  stop
  cp "$profile" "$traced"  # the grid's entries fill in the step sizes the trace lacks
  "$actord" calibrate "$configs_dir/$config" "${sets[@]}" --from-trace "$trace" -o "$traced" | sed 's/^/  trace: /'
  echo "$config: ${num} prompts of $input (+-50%) tokens, $output out; traced calibration at $cal_rate req/s"
  for rate in $rates; do
    echo " $rate req/s"
    "$actord" serve "$configs_dir/$config" "${sets[@]}" --port "$port" >"$log.server" 2>&1 &
    pid=$!
    wait_up
    # shellcheck disable=SC2046
    "$actord" bench serve --url "http://127.0.0.1:$port" $(workload "$rate") 2>/dev/null | summary measured
    stop
    # shellcheck disable=SC2046
    "$actord" simulate "$configs_dir/$config" "${sets[@]}" --profile "$profile" $(workload "$rate") | summary "sim grid"
    # shellcheck disable=SC2046
    "$actord" simulate "$configs_dir/$config" "${sets[@]}" --profile "$traced" $(workload "$rate") | summary "sim trace"
  done
done
