#!/usr/bin/env python3
# The per-lane logic of executors/cuda/flash_prefill_attention.cu's kernel for one warp (16 queries), emulated in
# numpy with mma.m16n8k16 defined by the PTX ISA's fragment layouts, against plain attention (causal, windows,
# partial tiles): a check of the kernel's design that runs without a GPU (no bf16 rounding: f64 throughout). Keep it
# in step with the kernel. Run: /usr/bin/python3 tests/reference/flash_prefill_emulation.py (prints the largest
# difference per case; all should be ~1e-15).
import numpy as np
rng = np.random.default_rng(1)
HD, KT = 64, 64
def a_layout(lane, reg, half):  # (row, col) of A element
    g, t = lane >> 2, lane & 3
    row = g + (8 if reg in (1, 3) else 0)
    col = 2 * t + half + (8 if reg >= 2 else 0)
    return row, col
def b_layout(lane, reg, half):  # (k, n)
    g, t = lane >> 2, lane & 3
    return 2 * t + half + (8 if reg == 1 else 0), g
def c_layout(lane, e):
    g, t = lane >> 2, lane & 3
    return g + 8 * (e >> 1), 2 * t + (e & 1)
def mma(d, a, b):  # d [32][4], a [32][4][2], b [32][2][2]
    A = np.zeros((16, 16)); B = np.zeros((16, 8)); C = np.zeros((16, 8))
    for lane in range(32):
        for reg in range(4):
            for h in range(2):
                A[a_layout(lane, reg, h)] = a[lane][reg][h]
        for reg in range(2):
            for h in range(2):
                B[b_layout(lane, reg, h)] = b[lane][reg][h]
        for e in range(4):
            C[c_layout(lane, e)] = d[lane][e]
    D = A @ B + C
    for lane in range(32):
        for e in range(4):
            d[lane][e] = D[c_layout(lane, e)]

# ldmatrix.sync.aligned.m8n8.x4.trans.b16 (PTX ISA): lane l gives row l % 8 of matrix l / 8 as (row, first column)
# of `mem`; matrix i's element (r, c) is mem[row of lane 8 i + r][its column + c]; with .trans, register i of lane
# (g, t) holds matrix i's (2t, g) and (2t + 1, g).
def ldmatrix_x4_trans(mem, rows):
    regs = [[None] * 4 for _ in range(32)]
    for i in range(4):
        M = np.array([[mem[rows[8 * i + r][0], rows[8 * i + r][1] + c] for c in range(8)] for r in range(8)])
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            regs[lane][i] = [M[2 * t, g], M[2 * t + 1, g]]
    return regs

def run(count, p_first, window, ctx_keys):
    Q = rng.standard_normal((16, HD)); K = rng.standard_normal((ctx_keys, HD)); V = rng.standard_normal((ctx_keys, HD))
    scale = 1 / np.sqrt(HD)
    q_last = p_first + count - 1
    k_first = max(0, p_first - window + 1) if window > 0 else 0
    qa = [[[[0, 0] for _ in range(4)] for _ in range(HD // 16)] for _ in range(32)]
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for kk in range(HD // 16):
            c = kk * 16 + 2 * t
            for reg, (r, cc) in enumerate([(g, c), (g + 8, c), (g, c + 8), (g + 8, c + 8)]):
                for h in range(2):
                    qa[lane][kk][reg][h] = Q[r, cc + h] * scale if r < count else 0.0
    o = [[[0.0] * 4 for _ in range(HD // 8)] for _ in range(32)]
    m = [[-np.inf, -np.inf] for _ in range(32)]; l = [[0.0, 0.0] for _ in range(32)]
    for k0 in range(k_first, q_last + 1, KT):
        keys = np.zeros((KT, HD)); values = np.zeros((KT, HD))  # as the kernel's shared stage holds them
        for key in range(KT):
            if k0 + key <= q_last:
                keys[key] = K[k0 + key]; values[key] = V[k0 + key]
        s = [[[0.0] * 4 for _ in range(KT // 8)] for _ in range(32)]
        for kk in range(HD // 16):
            for j in range(KT // 8):
                dl = [s[lane][j] for lane in range(32)]
                b = []
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    kr = keys[j * 8 + g]
                    b.append([[kr[kk * 16 + 2 * t], kr[kk * 16 + 2 * t + 1]], [kr[kk * 16 + 8 + 2 * t], kr[kk * 16 + 9 + 2 * t]]])
                mma(dl, [qa[lane][kk] for lane in range(32)], b)
        tile_max = [[-np.inf, -np.inf] for _ in range(32)]
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            for j in range(KT // 8):
                for e in range(4):
                    r = e >> 1
                    qpos = p_first + g + 8 * r; kpos = k0 + j * 8 + 2 * t + (e & 1)
                    keep = kpos <= qpos and (window <= 0 or kpos > qpos - window)
                    if not keep: s[lane][j][e] = -np.inf
                    tile_max[lane][r] = max(tile_max[lane][r], s[lane][j][e])
        for lane in range(32):  # quad reduction
            for r in range(2):
                quad = [tile_max[(lane & ~3) | i][r] for i in range(4)]
                tile_max[lane][r] = max(quad)
        base = [[0, 0] for _ in range(32)]
        for lane in range(32):
            for r in range(2):
                mn = max(m[lane][r], tile_max[lane][r])
                base[lane][r] = 0.0 if mn == -np.inf else mn
                corr = np.exp(m[lane][r] - base[lane][r])
                m[lane][r] = mn; l[lane][r] *= corr
                for dn in range(HD // 8):
                    o[lane][dn][2 * r] *= corr; o[lane][dn][2 * r + 1] *= corr
            for j in range(KT // 8):
                for e in range(4):
                    p = np.exp(s[lane][j][e] - base[lane][e >> 1]); s[lane][j][e] = p; l[lane][e >> 1] += p
        for j2 in range(KT // 16):
            pa = [[[s[lane][2 * j2][0], s[lane][2 * j2][1]], [s[lane][2 * j2][2], s[lane][2 * j2][3]],
                   [s[lane][2 * j2 + 1][0], s[lane][2 * j2 + 1][1]], [s[lane][2 * j2 + 1][2], s[lane][2 * j2 + 1][3]]] for lane in range(32)]
            for dn in range(0, HD // 8, 2):
                # the kernel's lane addresses: key 16 j2 + lane % 16, dimension 8 dn + 8 (lane / 16)
                rows = [(j2 * 16 + (lane & 15), dn * 8 + 8 * (lane >> 4)) for lane in range(32)]
                regs = ldmatrix_x4_trans(values, rows)
                for half in range(2):
                    b = [[regs[lane][2 * half], regs[lane][2 * half + 1]] for lane in range(32)]
                    dl = [o[lane][dn + half] for lane in range(32)]
                    mma(dl, pa, b)
    out = np.full((16, HD), np.nan)
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for r in range(2):
            quad = sum(l[(lane & ~3) | i][r] for i in range(4))
            row = g + 8 * r
            if row >= count: continue
            for dn in range(HD // 8):
                out[row, dn * 8 + 2 * t] = o[lane][dn][2 * r] / quad
                out[row, dn * 8 + 2 * t + 1] = o[lane][dn][2 * r + 1] / quad
    # reference
    worst = 0
    for row in range(count):
        qpos = p_first + row
        lo = max(0, qpos - window + 1) if window > 0 else 0
        sc = (K[lo:qpos + 1] @ Q[row]) * scale
        w = np.exp(sc - sc.max()); w /= w.sum()
        ref = w @ V[lo:qpos + 1]
        worst = max(worst, np.abs(out[row] - ref).max())
    return worst
for count, p_first, window in [(16, 0, 0), (16, 100, 0), (11, 37, 0), (16, 200, 50), (5, 3, 2), (16, 70, 200)]:
    print(count, p_first, window, run(count, p_first, window, p_first + count))
