#!/usr/bin/env python3
"""Summarise an actord --trace file (Chrome trace JSON): per rank, where its steps' time went and how much of its
communication overlapped its own compute.

    python3 bench/trace_overlap.py TRACE.json [--json] [--from-step N]

--from-step N: only the spans of steps N and later (leave out the prefill steps of a benchmark).

Per rank (a process of the trace named .../worker/... or, attention-FFN disaggregated, .../ffn/...):
  steps      traced steps
  wall ms    from its first span to its last
  compute    time in compute spans (attention, mlp, experts, embed, logits), less the collectives nested in them,
             both micro-batches' summed
  sample     time sampling
  comm       time in collectives (waiting for peers and the modelled link included; with two-batch overlap, until
             the micro-batch's turn came again), both micro-batches' summed
  between    time between steps (the worker waited for its next ExecuteStep)
  overlap    the share of comm during which the same rank computed on another micro-batch (tid): 0 without
             two-batch overlap, 1 when every collective hid behind the other micro-batch's compute
  idle share the share of wall in which the rank computed nothing: 1 - (its micro-batches' compute, as a union) /
             wall; waiting for peers (another pool) and between steps both count
Pools: ranks grouped by their name up to the rank part (replica/0/worker: attention, replica/0/ffn: the FFN pool),
their idle shares averaged over their wall time.
"""
import collections
import json
import sys


def union(intervals):
    out = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def length(intervals):
    return sum(end - start for start, end in intervals)


def intersect(a, b):
    """Both unions of disjoint sorted intervals."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append([start, end])
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a, b):
    """a minus b, both unions of disjoint sorted intervals."""
    out = []
    for start, end in a:
        cur = start
        for bs, be in b:
            if be <= cur or bs >= end:
                continue
            if bs > cur:
                out.append([cur, bs])
            cur = max(cur, be)
        if cur < end:
            out.append([cur, end])
    return out


def summarise(events):
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    spans = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            spans[e["pid"]].append(e)
    ranks = []
    for pid, evs in sorted(spans.items()):
        name = names.get(pid, str(pid))
        if "/worker/" not in name and "/ffn/" not in name:
            continue
        by_cat = collections.defaultdict(lambda: collections.defaultdict(list))  # cat -> tid -> intervals
        for e in evs:
            by_cat[e["cat"]][e.get("tid", 0)].append((e["ts"], e["ts"] + e["dur"]))
        # A micro-batch's compute, less its own collectives nested in it (the experts' dispatch and combine).
        compute = {tid: subtract(union(ivs), union(by_cat["comm"].get(tid, [])))
                   for tid, ivs in by_cat["compute"].items()}
        overlapped = 0.0
        for tid, ivs in by_cat["comm"].items():
            others = union([iv for t, c in compute.items() if t != tid for iv in c])
            overlapped += length(intersect(union(ivs), others))
        comm = sum(length(union(ivs)) for ivs in by_cat["comm"].values())
        first = min(e["ts"] for e in evs)
        last = max(e["ts"] + e["dur"] for e in evs)
        idle = length(union([iv for ivs in by_cat["idle"].values() for iv in ivs]))
        busy = length(union([iv for c in compute.values() for iv in c] +
                            [list(iv) for ivs in by_cat["sample"].values() for iv in ivs]))
        ranks.append({
            "rank": name,
            "steps": sum(1 for e in evs if e["name"] == "step"),
            "wall_ms": (last - first) / 1e3,
            "compute_ms": sum(length(c) for c in compute.values()) / 1e3,
            "sample_ms": length(union([iv for ivs in by_cat["sample"].values() for iv in ivs])) / 1e3,
            "comm_ms": comm / 1e3,
            "idle_ms": idle / 1e3,
            "overlap": overlapped / comm if comm > 0 else 0.0,
            "busy_ms": busy / 1e3,
            "idle_share": 1.0 - busy / (last - first) if last > first else 0.0,
        })
    pools = collections.defaultdict(lambda: {"ranks": 0, "busy_ms": 0.0, "wall_ms": 0.0})
    for r in ranks:
        pool = r["rank"].rsplit("/", 1)[0]
        pools[pool]["ranks"] += 1
        pools[pool]["busy_ms"] += r["busy_ms"]
        pools[pool]["wall_ms"] += r["wall_ms"]
    for p in pools.values():
        p["idle_share"] = 1.0 - p["busy_ms"] / p["wall_ms"] if p["wall_ms"] > 0 else 0.0
    return {"ranks": ranks, "pools": dict(pools)}


def from_step(events, first):
    """The events of steps >= first (metadata kept): e.g. decode steps only, the prefill steps left out."""
    return [e for e in events if e.get("ph") != "X" or e.get("args", {}).get("step", first) >= first]


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2
    with open(argv[1]) as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    if "--from-step" in argv:
        events = from_step(events, int(argv[argv.index("--from-step") + 1]))
    summary = summarise(events)
    if "--json" in argv:
        print(json.dumps(summary, indent=1))
        return 0
    print(f"{'rank':40} {'steps':>6} {'wall ms':>9} {'compute':>9} {'sample':>8} {'comm':>8} {'between':>8} "
          f"{'overlap':>8} {'idle share':>10}")
    for r in summary["ranks"]:
        print(f"{r['rank']:40} {r['steps']:>6} {r['wall_ms']:>9.1f} {r['compute_ms']:>9.1f} {r['sample_ms']:>8.1f} "
              f"{r['comm_ms']:>8.1f} {r['idle_ms']:>8.1f} {r['overlap']:>8.2f} {r['idle_share']:>10.2f}")
    for name, p in summary["pools"].items():
        print(f"pool {name}: {p['ranks']} ranks, idle share {p['idle_share']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
