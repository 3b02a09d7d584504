#!/usr/bin/env python3
"""Live reshape (actord apply) while requests stream: for each kind of change, the time from the apply to the new
shape serving and to the whole change done, and the worst gap between two tokens a stream saw around it.

Starts `actord serve` on MODEL_DIR with one worker process, then for each kind: N streaming completions
(greedy, ignore_eos) start, once every stream has its first tokens the group is applied the kind's shape
(POST /admin/topology), the streams finish, and the group is applied one worker again (the way back is measured
too). A stream's worst gap is the longest time between two of its token events from the apply on; the streams'
usual gap (the 99th percentile of the gaps before the apply) is printed beside it, and how many streams were still running
when the apply returned (only those crossed the change). Run it twice, with
--reshape-kv move and recompute, to compare moving running sequences with their KV against recomputing them.

    bench/reshape_bench.py --actord build/actord --model /tmp/llama134m --load-format dummy \\
        --kinds dp,tp,pp,afd,afd12 --reshape-kv move
"""
import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

# The groups (lines of `groups:`) each kind applies; each kind starts from and returns to its base (BASE_OF:
# "base" unless named), and the kinds of one run share theirs.
SHAPES = {
    "base": "{name: main, placement: process, threads: 1}",
    "dp": "{name: main, replicas: 2, placement: process, threads: 1}",
    "tp": "{name: main, tp: 2, placement: process, threads: 1}",
    "pp": "{name: main, pp: 2, placement: process, threads: 1}",
    "ep": "{name: main, ep: 2, placement: process, threads: 1}",
    "afd": "{name: main, afd: {attention: {workers: 1}, ffn: {workers: 1}}, placement: process, threads: 1}",
    "afd12": "{name: main, afd: {attention: {workers: 1}, ffn: {workers: 2}}, placement: process, threads: 1, "
             "oversubscribe: true}",
    # Prefill/decode disaggregation: one prefill and one decode worker process; the decode group to tp 2, the
    # prefill group to 2 replicas, or both (one group after the other).
    "pd": "{name: prefill, role: prefill, placement: process, threads: 1, oversubscribe: true}\n"
          "  - {name: decode, role: decode, placement: process, threads: 1, oversubscribe: true}",
    "pd_tp": "{name: prefill, role: prefill, placement: process, threads: 1, oversubscribe: true}\n"
             "  - {name: decode, role: decode, tp: 2, placement: process, threads: 1, oversubscribe: true}",
    "pd_dp": "{name: prefill, role: prefill, replicas: 2, placement: process, threads: 1, oversubscribe: true}\n"
             "  - {name: decode, role: decode, placement: process, threads: 1, oversubscribe: true}",
    "pd_both": "{name: prefill, role: prefill, replicas: 2, placement: process, threads: 1, oversubscribe: true}\n"
               "  - {name: decode, role: decode, tp: 2, placement: process, threads: 1, oversubscribe: true}",
}
BASE_OF = {"pd_tp": "pd", "pd_dp": "pd", "pd_both": "pd"}


def topology(args, shape):
    return (f"model:\n  path: {args.model}\n  load_format: {args.load_format}\n  seed: 1\n"
            f"engine:\n  max_num_seqs: 64\n  kv_cache_memory: {args.kv_cache_memory}\n"
            f"  reshape_kv: {args.reshape_kv}\ngroups:\n  - {SHAPES[shape]}\n")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body, timeout=300):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def stream(port, prompt, max_tokens, times, started):
    """One streaming completion; appends the arrival time of each token event to `times`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True}
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"completion: HTTP {resp.status}: {resp.read()[:200]}")
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            break
        event = json.loads(payload)
        if event.get("choices") and event["choices"][0].get("text") is not None:
            times.append(time.monotonic())
            if len(times) == 3:
                started.release()
    conn.close()


def change(args, port, target, prompts):
    """Streams `prompts`, applies `target` once all stream; returns (apply seconds, message, gaps after, gaps all)."""
    times = [[] for _ in prompts]
    started = threading.Semaphore(0)
    threads = [threading.Thread(target=stream, args=(port, p, args.max_tokens, t, started)) for p, t in zip(prompts, times)]
    for t in threads:
        t.start()
    for _ in prompts:
        started.acquire()
    t0 = time.monotonic()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=os.path.dirname(os.path.abspath(args.actord))) as f:
        f.write(topology(args, target))
        f.flush()
        status, data = post(port, "/admin/topology", {"topology": topology(args, target), "source": f.name})
    t1 = time.monotonic()
    if status != 200:
        raise RuntimeError(f"apply {target}: HTTP {status}: {data[:300]}")
    for t in threads:
        t.join()
    worst, usual = [], []
    through = sum(1 for ts in times if ts and ts[-1] > t1)  # still streaming when the apply returned
    for ts in times:
        gaps = [(b - a, a) for a, b in zip(ts, ts[1:])]
        after = [g for g, a in gaps if a >= t0 - 0.05]
        before = [g for g, a in gaps if a < t0 - 0.05]
        worst.append(max(after) if after else 0.0)
        usual.extend(before)
    return t1 - t0, json.loads(data).get("applied", ""), worst, usual, through


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--actord", default="build/actord")
    ap.add_argument("--model", required=True)
    ap.add_argument("--load-format", default="auto")
    ap.add_argument("--kinds", default="dp,tp,pp,afd")
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--prompt-words", type=int, default=48)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--kv-cache-memory", default="512MiB")
    ap.add_argument("--reshape-kv", default="move", choices=["move", "recompute"])
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    base = BASE_OF.get(kinds[0], "base")
    if any(BASE_OF.get(k, "base") != base for k in kinds):
        sys.exit("--kinds: the kinds of one run start from one base (" + base + ")")
    port = free_port()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as cfg:
        cfg.write(topology(args, base))
        cfg.flush()
        server = subprocess.Popen([args.actord, "serve", cfg.name, "--port", str(port)],
                                  stdout=subprocess.DEVNULL, stderr=open("/tmp/reshape_bench.serve.log", "w"))
        try:
            for _ in range(600):
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                    conn.request("GET", "/health")
                    if conn.getresponse().status == 200:
                        break
                except OSError:
                    time.sleep(0.1)
            words = "the quick brown fox jumps over a lazy dog while seven small birds sing".split()
            prompts = [" ".join(words[(i + j) % len(words)] for j in range(args.prompt_words)) for i in range(args.streams)]
            change(args, port, base, prompts)  # warm-up: the same shape again (no change)
            print(f"reshape_kv {args.reshape_kv}, {args.streams} streams, max_tokens {args.max_tokens}")
            print(f"{'change':<16} {'apply s':>8} {'through':>8} {'worst gap ms':>13} {'p99 gap ms':>13}  coordinator")
            for kind in kinds:
                for target, name in ((kind, f"{base} -> {kind}"), (base, f"{kind} -> {base}")):
                    seconds, message, worst, usual, through = change(args, port, target, prompts)
                    usual_ms = sorted(usual)[int(0.99 * (len(usual) - 1))] * 1e3 if usual else 0.0
                    print(f"{name:<16} {seconds:>8.3f} {through:>4}/{len(prompts):<3} {max(worst) * 1e3:>13.0f} "
                          f"{usual_ms:>13.1f}  {message}", flush=True)
        finally:
            server.terminate()
            server.wait(timeout=60)


if __name__ == "__main__":
    sys.exit(main())
