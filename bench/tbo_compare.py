#!/usr/bin/env python3
"""Two-batch overlap on vs off, side by side: runs `actord bench offline` with groups[0].tbo false and true,
alternated (off first in odd rounds, on first in even ones: a run right after another is a few percent faster on a
shared machine), each traced, and reports per round the decode tok/s and, from the traces' decode steps (rank 0's
median step), the step time off and on, the time off spent in collectives (comm) and computing (step - comm), and
the share of the communication hidden by step time: (step off - step on) / comm off, 1 when the step with overlap
takes max(compute, comm) = compute, 0 when it takes their sum. Plus the traces' overlap fraction with TBO
(bench/trace_overlap.py: comm during which the rank computed another micro-batch).

    python3 bench/tbo_compare.py --actord build/actord --config CONFIG [--model DIR] [--seqs 128] [--rounds 3]
        [--input-len 32] [--output-len 64] [--from-step 6] [--set KEY=VALUE ...] [--set-on KEY=VALUE ...]

--from-step: the first decode step (the prefill steps before it are left out). --set-on: for the runs with TBO only
(e.g. groups[0].micro_batches=3, which needs tbo).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_overlap  # noqa: E402


def step_times(events):
    """Rank 0's (the first worker in the trace) steps: [(step ms, comm ms)]."""
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    workers = sorted(pid for pid, n in names.items() if "/worker/" in n)
    if not workers:
        return []
    pid = workers[0]
    by_step = {}
    for e in events:
        if e.get("ph") != "X" or e["pid"] != pid:
            continue
        row = by_step.setdefault(e.get("args", {}).get("step"), [0.0, 0.0])
        if e["cat"] == "step":
            row[0] += e["dur"] / 1e3
        elif e["cat"] == "comm":
            row[1] += e["dur"] / 1e3
    return [tuple(r) for r in by_step.values() if r[0] > 0]


def run(args, tbo, trace):
    cmd = [args.actord, "bench", "offline", "--config", args.config, "--input-len", str(args.input_len),
           "--output-len", str(args.output_len), "--num-prompts", str(args.seqs), "--concurrency", str(args.seqs),
           "--set", f"groups[0].tbo={tbo}", "--trace", trace, "--json"]
    if args.model:
        cmd += ["--model", args.model]
    for kv in args.set + (args.set_on if tbo == "true" else []):
        cmd += ["--set", kv]
    ran = subprocess.run(cmd, capture_output=True, text=True)
    if ran.returncode != 0:
        sys.exit(f"tbo={tbo}: {' '.join(cmd)}\n{ran.stderr.strip()}")
    out = ran.stdout
    tok_s = json.loads(out)["decode_tokens_per_s"]
    with open(trace) as f:
        events = trace_overlap.from_step(json.load(f)["traceEvents"], args.from_step)  # the decode steps
    steps = step_times(events)
    summary = trace_overlap.summarise(events)
    overlap = statistics.mean(r["overlap"] for r in summary["ranks"]) if summary["ranks"] else 0.0
    return {"tok_s": tok_s, "step_ms": statistics.median(s for s, _ in steps),
            "comm_ms": statistics.median(c for _, c in steps), "overlap": overlap}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--actord", default="build/actord")
    p.add_argument("--config", required=True)
    p.add_argument("--model")
    p.add_argument("--seqs", type=int, default=128)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--from-step", type=int, default=6)
    p.add_argument("--set", action="append", default=[], help="for both runs")
    p.add_argument("--set-on", action="append", default=[],
                   help="for the runs with TBO only (groups[0].micro_batches=3)")
    args = p.parse_args()
    print(f"{'round':>5} {'tok/s off':>10} {'tok/s on':>9} {'x':>5} {'step off':>9} {'comm off':>9} "
          f"{'compute':>8} {'step on':>8} {'hidden':>7} {'overlap':>8}")
    hidden_all = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(1, args.rounds + 1):
            order = ["false", "true"] if r % 2 else ["true", "false"]
            res = {t: run(args, t, os.path.join(tmp, f"{t}.json")) for t in order}
            off, on = res["false"], res["true"]
            compute = off["step_ms"] - off["comm_ms"]
            hidden = (off["step_ms"] - on["step_ms"]) / off["comm_ms"] if off["comm_ms"] > 0 else 0.0
            hidden_all.append(hidden)
            print(f"{r:>5} {off['tok_s']:>10.0f} {on['tok_s']:>9.0f} {on['tok_s'] / off['tok_s']:>5.2f} "
                  f"{off['step_ms']:>9.2f} {off['comm_ms']:>9.2f} {compute:>8.2f} {on['step_ms']:>8.2f} "
                  f"{hidden:>7.2f} {on['overlap']:>8.2f}")
    print(f"hidden by step time: median {statistics.median(hidden_all):.2f} over {len(hidden_all)} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
