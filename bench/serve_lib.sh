# Sourced by the bench scripts that start a server and load it, once `log` (the run's file prefix) is set:
# `port`, a port for this run; `pid`, the server's once started; `stop`, ends it (signal `stop_signal`, TERM unless
# set) and waits; `wait_up`, waits until the server at `port` answers /v1/models, or exits naming the tail of
# $log.server; `bench_serve_json`, one `actord bench serve` of the script's workload (actord, num, rate, input,
# output: NUM random prompts of INPUT +-50% tokens, OUTPUT out, Poisson at RATE/s, 2 warm-up requests, seed 7)
# against it, printing the JSON report. The script sets its own EXIT trap (calling stop).
port=$((20000 + $$ % 20000))
pid=
stop() { [ -n "$pid" ] && kill "-${stop_signal:-TERM}" "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; pid=; }
wait_up() {
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null && return 0; sleep 0.5; done
  echo "server did not come up: $(tail -5 "$log.server")" >&2
  exit 1
}
bench_serve_json() {
  "$actord" bench serve --url "http://127.0.0.1:$port" --num-prompts "$num" --concurrency "$num" --request-rate "$rate" \
    --input-len "$input" --output-len "$output" --random-range-ratio 0.5 --warmup 2 --seed 7 --json 2>/dev/null
}
