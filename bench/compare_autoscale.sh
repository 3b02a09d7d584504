#!/usr/bin/env bash
# groups[].autoscale against fixed replica counts, side by side in one run, alternating ROUNDS times, every server on
# the same 2 cores: actord with one replica, with two replicas, and with an autoscaled group of 1 to 2 replicas
# (THREADS threads each; the autoscaled group at TARGET sequences per replica, up after UP, down after DOWN). Each
# is loaded by `actord bench serve` with Poisson arrivals (RATE requests/s) of NUM random prompts of INPUT tokens
# (+-50%) and OUTPUT tokens each, then left idle for IDLE seconds. Prints per server and round: output tok/s, TTFT
# p50 / p99 and ITL p50 / p99 (ms) as the clients saw them; for the autoscaled one also each resize, in seconds
# after the load began, and its replicas at the end of the idle time. SEQS: engine.max_num_seqs of every server.
# BASELINE: another actord binary (an earlier build), whose autoscaled group runs too, after this one's, each round.
# TOKENS: a fourth server, the autoscaled group with target_prompt_tokens TOKENS as well (its prefill backlog).
# Usage: [ROUNDS=2] [RATE=4] [NUM=48] [INPUT=256] [OUTPUT=64] [THREADS=1] [TARGET=4] [UP=1s] [DOWN=5s] [IDLE=8] \
#        [SEQS=64] [BASELINE=ACTORD] [TOKENS=N] bench/compare_autoscale.sh MODEL [ACTORD]
set -euo pipefail
model=$1 actord=${2:-build/actord}
rounds=${ROUNDS:-2} rate=${RATE:-4} num=${NUM:-48} input=${INPUT:-256} output=${OUTPUT:-64} threads=${THREADS:-1}
target=${TARGET:-4} up=${UP:-1s} down=${DOWN:-5s} idle=${IDLE:-8} seqs=${SEQS:-64} baseline=${BASELINE:-}
tokens=${TOKENS:-}
config=$(dirname "$0")/../configs/quickstart.yaml
log=/tmp/compare_autoscale.$$
source "$(dirname "$0")/serve_lib.sh"
trap stop EXIT
load() {  # $1: label
  bench_serve_json |
    python3 -c 'import json, sys
j = json.load(sys.stdin)
t, i = j["ttft_ms"], j["itl_ms"]
print("round %s %-24s output %6.1f tok/s  TTFT p50 %7.1f p99 %7.1f ms  ITL p50 %5.1f p99 %6.1f ms"
      % (sys.argv[1], sys.argv[2], j["output_tokens_per_s"], t["median"], t["p99"], i["median"], i["p99"]))' "$round" "$1"
}
server() {  # $1: label, then --set assignments; serves with $bin (default: ACTORD)
  local label=$1
  shift
  "${bin:-$actord}" serve "$config" --model "$model" --port "$port" --log-level info --set "engine.kv_cache_memory=512MiB" \
    --set "engine.max_num_seqs=$seqs" --set "groups[0].threads=$threads" "$@" >"$log.server" 2>&1 &
  pid=$!
  wait_up
  local began
  began=$(date +%H:%M:%S.%N)
  load "$label"
  if [[ "$label" = autoscaled* ]]; then
    sleep "$idle"
    python3 - "$log.server" "$began" <<'PY'
import re, sys
def seconds(tod):  # "HH:MM:SS.fraction" -> seconds since midnight
    h, m, s = tod.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)
began = seconds(sys.argv[2])
for line in open(sys.argv[1]):
    m = re.match(r"\[(\d+:\d+:\d+\.\d+)\].*autoscale: group \S+: (\d+ -> \d+ replicas)", line)
    if m:
        print("          resized %s at %.1f s" % (m.group(2), (seconds(m.group(1)) - began) % 86400))
PY
    curl -sf "http://127.0.0.1:$port/admin/fleet" |
      python3 -c 'import json, sys; j = json.load(sys.stdin); print("          after %s s idle: %d replica(s); %s" % (sys.argv[1], len(j["replicas"]), "; ".join(j["autoscale"])))' "$idle"
  fi
  stop
}
echo "$(basename "$model"): ${rate} req/s, $num prompts of $input (+-50%) tokens, $output out; $threads thread(s) per replica, max_num_seqs $seqs; autoscale 1-2 replicas, $target sequences each, up after $up, down after $down"
autoscale="groups[0].autoscale={max_replicas: 2, target_sequences: $target, scale_up_after: $up, scale_down_after: $down, interval: 200ms}"
for round in $(seq "$rounds"); do
  server "1 replica"
  server "2 replicas" --set "groups[0].replicas=2"
  server autoscaled --set "$autoscale"
  [ -z "$tokens" ] || server "autoscaled +tokens" --set "${autoscale/target_sequences:/target_prompt_tokens: $tokens, target_sequences:}"
  [ -z "$baseline" ] || bin=$baseline server "autoscaled (baseline)" --set "$autoscale"
done
rm -f "$log.server"
