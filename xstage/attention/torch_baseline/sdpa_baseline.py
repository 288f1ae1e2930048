#!/usr/bin/env python3
"""Fallback SDPA baselines for `xstage bench attention --baselines-json` when the
LibTorch part (XSTAGE_TORCH_BASELINES) could not be built: times PyTorch SDPA
with only the flash or only the cuDNN backend on the same sweep, timed like the
bench (CUDA events, warm-up, samples of back-to-back launches, median).

  python3 sdpa_baseline.py --seq 1K,4K --heads 24,6 --dims 64,128 --causal both --out sdpa.json
"""
import argparse
import json
import math
import statistics

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F


def parse(s):
    out = []
    for item in s.split(","):
        mult = 1024 if item[-1] in "kK" else 1
        out.append(int(item.rstrip("kK")) * mult)
    return out


def time_ms(fn, warmup, reps, budget_ms):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(n):
        e0.record()
        for _ in range(n):
            fn()
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1)

    est = 0.0
    for _ in range(max(warmup, 1)):
        est = timed(1)
    inner = min(max(math.ceil(2.0 / max(est, 1e-3)), 1), 50)
    samples, total = [], 0.0
    min_samples = 2 if est >= 50 else 3
    while len(samples) < reps and (len(samples) < min_samples or total < budget_ms):
        t = timed(inner)
        samples.append(t / inner)
        total += t
    return statistics.median(samples)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", default="1K,4K,16K,32K,64K,128K")
    ap.add_argument("--heads", default="24,6,40,10")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--causal", default="both")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--budget-ms", type=float, default=300)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    causals = {"both": [False, True], "on": [True], "off": [False]}[a.causal]
    rows = []
    for S in parse(a.seq):
        for H in parse(a.heads):
            for D in parse(a.dims):
                for causal in causals:
                    q, k, v = (torch.randn(1, S, H, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
                    row = {"S": S, "heads": H, "D": D, "causal": causal}
                    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                        try:
                            with sdpa_kernel([backend]):
                                row[f"sdpa_{name}_ms"] = time_ms(
                                    lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                    a.warmup, a.reps, a.budget_ms)
                        except Exception as e:  # backend refused the shape
                            row[f"sdpa_{name}_ms"] = None
                            row[f"sdpa_{name}_error"] = str(e).splitlines()[0]
                    rows.append(row)
                    print(row, flush=True)
                    del q, k, v
    with open(a.out, "w") as f:
        json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
