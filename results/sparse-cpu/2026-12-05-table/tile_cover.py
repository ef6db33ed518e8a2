#!/usr/bin/env python3
"""How many 64 x 64 (query x key) tiles of one 512-token prefill ubatch a vertical-slash selection
leaves non-empty, for columns and diagonals drawn uniformly (the default budgets: 1000 columns with
the first 30 forced, 6096 diagonals with the last 100 forced). The CPU flash attention skips only
empty tiles. An estimate of the pattern's spread, not the model's real selection.

    python3 tile_cover.py    (numpy; prints: ubatch start, tiles kept / causal tiles, entries kept / causal entries)
"""

import numpy as np

rng = np.random.default_rng(0)


def cover(p: int, v: int = 1000, s: int = 6096, t: int = 512, tile: int = 64) -> tuple[float, float]:
    n_kv = p + t
    cols = np.zeros(n_kv, bool)
    cols[:30] = True
    cols[rng.choice(np.arange(30, n_kv), v - 30, replace=False)] = True
    diag = np.zeros(n_kv, bool)
    diag[:100] = True
    diag[rng.choice(np.arange(100, n_kv), s - 100, replace=False)] = True
    d = np.arange(p, p + t)[:, None] - np.arange(n_kv)[None, :]
    causal = d >= 0
    keep = (cols[None, :] | diag[np.clip(d, 0, n_kv - 1)]) & causal
    nt = (n_kv + tile - 1) // tile
    kp = np.zeros((t, nt * tile), bool)
    kp[:, :n_kv] = keep
    cp = np.zeros((t, nt * tile), bool)
    cp[:, :n_kv] = causal
    kt = kp.reshape(t // tile, tile, nt, tile).any(axis=(1, 3))
    ct = cp.reshape(t // tile, tile, nt, tile).any(axis=(1, 3))
    return float(kt.sum() / ct.sum()), float(keep.sum() / causal.sum())


for start in (8192, 16384 - 512, 32768, 65536 - 512):
    tiles, entries = cover(start)
    print(f"ubatch at {start:>6}: tiles kept {tiles:.3f}, entries kept {entries:.3f}")
