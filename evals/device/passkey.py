#!/usr/bin/env python3
"""Passkey retrieval past the trained context: naive vs linear vs YaRN vs DCA (one run, same build).

usage: passkey.py BIN_DIR MODEL N_CTX_TRAIN OUT.json [--lengths 4096,16384,32768] [--trials 8]
                  [--methods naive,linear,yarn,dca] [--jobs 8]

A 5-digit key is hidden at depth 10..90% of repeated filler; the model continues "The pass key is".
A trial passes when the key's digits appear in the first 8 generated tokens. Each cell reports
passes/trials and a 95% Wilson interval. In-range lengths (<= trained context) give the ceiling.
Trials of one cell run as --jobs concurrent llama-completion processes on the one GPU.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "


def prompt(n_chars: int, key: int, depth: float) -> str:
    needle = f" The pass key is {key}. Remember it. {key} is the pass key. "
    body = FILLER * (n_chars // len(FILLER) + 1)
    body = body[:n_chars]
    cut = body.rfind(". ", 0, int(len(body) * depth)) + 2
    return (
        "There is an important piece of information hidden inside a lot of irrelevant text. "
        "Find it and memorize it.\n" + body[:cut] + needle + body[cut:]
        + "\nWhat is the pass key? The pass key is"
    )


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def methods(length: int, n_train: int) -> dict[str, list[str]]:
    f = max(1.0, length / n_train)
    return {
        "naive": [],
        "linear": ["--rope-scaling", "linear", "--rope-scale", f"{f:g}"],
        "yarn": ["--rope-scaling", "yarn", "--rope-scale", f"{f:g}", "--yarn-orig-ctx", str(n_train)],
        "dca": ["--dca", "on"],
    }


def run_one(bin_dir: Path, model: str, text: str, n_ctx: int, extra: list[str]) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
        fh.write(text)
    cmd = [str(bin_dir / "llama-completion"), "-m", model, "-f", fh.name, "-no-cnv", "--temp", "0",
           "-n", "8", "-c", str(n_ctx), "-fa", "on", "-ngl", "99", "--no-display-prompt", *extra]
    res = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=300)
    Path(fh.name).unlink()
    return res.stdout if res.returncode == 0 else f"<rc={res.returncode}> {res.stderr[-300:]}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir", type=Path)
    ap.add_argument("model")
    ap.add_argument("n_ctx_train", type=int)
    ap.add_argument("out", type=Path)
    ap.add_argument("--lengths", default="4096,16384,32768")
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--chars-per-token", type=float, default=3.8)
    ap.add_argument("--methods", default="naive,linear,yarn,dca")
    ap.add_argument("--jobs", type=int, default=8)
    args = ap.parse_args()
    rng = random.Random(1234)
    cases = [(rng.randint(10000, 99999), 0.1 + 0.8 * i / max(1, args.trials - 1)) for i in range(args.trials)]
    cells = []
    for length in [int(x) for x in args.lengths.split(",")]:
        for name, extra in methods(length, args.n_ctx_train).items():
            if name not in args.methods.split(","):
                continue
            if length <= args.n_ctx_train and name != "naive":
                continue
            t0 = time.time()
            texts = [prompt(int((length - 100) * args.chars_per_token), key, depth) for key, depth in cases]
            with ThreadPoolExecutor(max_workers=args.jobs) as pool:
                outs = list(pool.map(lambda t: run_one(args.bin_dir, args.model, t, int(length * 1.3) + 64, extra), texts))
            passes, samples = 0, []
            for (key, depth), got in zip(cases, outs):
                ok = str(key) in got.replace(" ", "")
                passes += ok
                samples.append({"key": key, "depth": round(depth, 2), "ok": ok, "out": got[:80]})
            lo, hi = wilson(passes, len(cases))
            cells.append({"length": length, "method": name, "passes": passes, "trials": len(cases),
                          "wilson95": [round(lo, 3), round(hi, 3)], "wall_s": round(time.time() - t0, 1),
                          "args": extra, "samples": samples})
            print(f"{length:>7} {name:>7} {passes}/{len(cases)}  [{lo:.2f},{hi:.2f}]", flush=True)
    args.out.write_text(json.dumps({"model": args.model, "n_ctx_train": args.n_ctx_train,
                                    "command": sys.argv, "cells": cells}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
