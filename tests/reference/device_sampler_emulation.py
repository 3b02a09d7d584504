#!/usr/bin/env python3
# The selection logic of executors/cuda/device_sampler.cu emulated in numpy: the top-k radix select (8 bits a pass,
# every token above the k-th key and those equal to it) against a sort, and the candidate floors plus walk of a draw
# without top-k against sampler.cpp's walk over the whole ranked row. A check of the kernel's design without a GPU;
# keep it in step with the kernel. Run: /usr/bin/python3 tests/reference/device_sampler_emulation.py (0 mismatches).
import numpy as np, struct
def order_key(s):
    u = struct.unpack('<I', struct.pack('<f', 0.0 if s == 0 else s))[0]
    return (~u & 0xffffffff) if (u & 0x80000000) else (u | 0x80000000)
def topk_candidates(s, k):
    keys = [None if np.isnan(x) else order_key(np.float32(x)) for x in s]
    non_nan = sum(k_ is not None for k_ in keys)
    allc = non_nan <= k
    prefix = mask = 0; remaining = k
    shift = 24
    while shift >= 0 and not allc:
        hist = [0]*256
        for key in keys:
            if key is None: continue
            if (key & mask) == prefix: hist[(key >> shift) & 255] += 1
        above = 0; digit = 0
        for d in range(255, -1, -1):
            if above + hist[d] >= remaining: digit = d; break
            above += hist[d]
        remaining -= above
        prefix |= digit << shift; mask |= 255 << shift
        shift -= 8
    cand = [(s[i], i) for i, key in enumerate(keys) if key is not None and (allc or key >= prefix)]
    cand.sort(key=lambda c: (-c[0], c[1]))
    return cand[:k], len(cand)
rng = np.random.default_rng(3)
bad = 0
for trial in range(300):
    n = int(rng.integers(5, 3000))
    s = rng.standard_normal(n).astype(np.float32)
    if trial % 3 == 0: s = np.round(s * 4) / 4  # ties
    if trial % 5 == 0: s[rng.integers(0, n, 10)] = -np.inf
    if trial % 7 == 0: s[rng.integers(0, n, 5)] = np.nan
    k = int(rng.integers(1, min(n, 1024) + 1))
    got, count = topk_candidates(list(s), k)
    ref = sorted([(s[i], i) for i in range(n) if not np.isnan(s[i])], key=lambda c: (-c[0], c[1]))[:k]
    if [g[1] for g in got] != [r[1] for r in ref]: bad += 1
print("top-k mismatches:", bad, "of 300")

def walk(ranked_s, ids, count, maxs, min_w, total, top_p, u):
    def weight(i):
        if i >= count: return None
        w = np.exp(np.float64(np.float32(ranked_s[i] - maxs)))
        return w if (w > 0 and w >= min_w) else None
    keep = count
    if top_p < 1:
        mass = 0.0; keep = 0
        while True:
            w = weight(keep)
            if w is None: break
            keep += 1; mass += w / total
            if mass >= top_p: break
        total = 0.0
        for j in range(keep):
            w = weight(j)
            if w is None: break
            total += w
    r = u * total; acc = 0.0; i = 0
    while i < keep:
        w = weight(i)
        if w is None: break
        acc += w
        if r < acc: return ids[i]
        i += 1
    return ids[i - 1 if i > 0 else 0]

def device_draw(row, t, top_p, min_p, u, C=1024):
    row = row.astype(np.float32); t = np.float32(t)
    s = row / t
    maxs = np.float32(np.max(row) / t)
    w = np.exp((s - maxs).astype(np.float64))
    total = w[w >= min_p].sum()
    mass = (top_p if top_p < 1 else u) * total
    safe = (total - mass) / (2.0 * len(row))
    floor = None
    for f in (4096 * safe, 64 * safe, safe):
        at = max(f, min_p)
        sel = (w >= at) & (w > 0)
        n, held = sel.sum(), w[sel].sum()
        if n <= C and (at == min_p or held > mass + 1e-9 * total): floor = at; break
    if floor is None: return None, total
    idx = np.nonzero((w >= floor) & (w > 0))[0]
    order = sorted(idx, key=lambda i: (-s[i], i))
    return walk([s[i] for i in order], order, len(order), maxs, min_p, total, top_p, u), total

def full_draw(row, t, top_p, min_p, u, total):
    row = row.astype(np.float32); t = np.float32(t)
    s = row / t
    maxs = np.float32(np.max(row) / t)
    order = sorted(range(len(row)), key=lambda i: (-s[i], i))
    return walk([s[i] for i in order], order, len(order), maxs, min_p, total, top_p, u)

rng = np.random.default_rng(5)
bad = fall = 0
for trial in range(200):
    n = int(rng.integers(50, 5000))
    row = (rng.standard_normal(n) * rng.choice([0.5, 2, 6])).astype(np.float32)
    t = float(rng.choice([0.3, 0.8, 1.0, 1.5]))
    top_p = float(rng.choice([1.0, 0.9, 0.5]))
    min_p = float(rng.choice([0.0, 0.05]))
    u = rng.random()
    got, total = device_draw(row, t, top_p, min_p, u)
    if got is None: fall += 1; continue
    if got != full_draw(row, t, top_p, min_p, u, total): bad += 1
print("walk mismatches:", bad, "host fallbacks:", fall, "of 200")
