#!/usr/bin/env python3
"""Side-by-side table of several `xstage bench attention` JSON files (variants of
our kernel measured in one device run): TFLOPs per variant, best SDPA backend,
and each variant's ratio to it.

  python3 bench_compare.py default=attention.json pingpong=attention_pingpong.json [--min-seq 16384]
"""
import json
import sys


def main():
    min_seq = 0
    files = []
    args = sys.argv[1:]
    while args:
        a = args.pop(0)
        if a == "--min-seq":
            min_seq = int(args.pop(0))
        else:
            name, path = a.split("=", 1)
            try:
                with open(path) as f:
                    files.append((name, {(r["S"], r["heads"], r["D"], r["causal"]): r for r in json.load(f)["rows"]}))
            except (OSError, ValueError) as e:
                print(f"{name}: cannot read {path}: {e}")
    if not files:
        return
    keys = sorted({k for _, rows in files for k in rows}, key=lambda k: (k[3], k[2], k[0], k[1]))
    head = f"{'S':>7} {'heads':>5} {'D':>4} {'causal':>6} | " + " ".join(f"{n[:10]:>10}" for n, _ in files)
    head += f" | {'SDPA best':>9} | " + " ".join(f"{('r_' + n)[:9]:>9}" for n, _ in files)
    print(head)
    for k in keys:
        if k[0] < min_seq:
            continue
        best = None
        for _, rows in files:
            r = rows.get(k)
            if r:
                for col in ("sdpa_flash_tflops", "sdpa_cudnn_tflops"):
                    if r.get(col):
                        best = max(best or 0.0, r[col])
        ours = [rows.get(k, {}).get("ours_tflops") for _, rows in files]
        line = f"{k[0]:>7} {k[1]:>5} {k[2]:>4} {('yes' if k[3] else 'no'):>6} | "
        line += " ".join(f"{o:>10.1f}" if o else f"{'-':>10}" for o in ours)
        line += f" | {best:>9.1f} | " if best else f" | {'-':>9} | "
        line += " ".join(f"{o / best:>9.3f}" if (o and best) else f"{'-':>9}" for o in ours)
        print(line)


if __name__ == "__main__":
    main()
