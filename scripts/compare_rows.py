#!/usr/bin/env python3
"""Compares the rows of the `compare` device stage: OUT/compare_<name>_{base,new}_r<k>.json.

Each side's time of a row is its fastest round (the rounds run in ABBA order). Prints,
per bench, each row's time in the base and in the new tree, the ratio new/base
(< 1: the new tree is faster) and whether both rows were correct; then the geomean and
the range of the ratios per bench. The last line sums up every bench (for the summary).
"""
import json
import math
import sys
from pathlib import Path

# bench name -> (key of a row, [(label, time field)], correctness field or None)
BENCHES = {
    "attention": (lambda r: (r["S"], r["heads"], r["D"], r["causal"]), [("ours", "ours_ms")], "correct"),
    "moe": (lambda r: (r["experts"], r["topk"], r["hidden"], r["intermediate"], r["tokens_per_rank"], r["routing"]),
            [("IL", "interleaved_us"), ("EW", "expert_wave_us")], "correct"),
    "dit_flux": (lambda r: (r["preset"], r["P"], r["blocks"], r["tokens"]), [("step", "single_step_ms")], None),
    "dit_wan": (lambda r: (r["preset"], r["P"], r["blocks"], r["tokens"]), [("step", "single_step_ms")], None),
}


def rows_of(path):
    try:
        return json.loads(Path(path).read_text()).get("rows", [])
    except (OSError, ValueError) as e:
        print(f"  {path}: {e}")
        return []


def side_rows(out, name, side, key, fields, ok_field):
    """key -> row of the side's fastest round per time field (correct only if every round was)."""
    best = {}
    for path in sorted(out.glob(f"compare_{name}_{side}_r*.json")):
        for r in rows_of(path):
            k = key(r)
            if k not in best:
                best[k] = dict(r)
                continue
            b = best[k]
            for _, f in fields:
                if r.get(f) and (not b.get(f) or r[f] < b[f]):
                    b[f] = r[f]
            if ok_field:
                b[ok_field] = bool(b.get(ok_field)) and bool(r.get(ok_field))
    return best


def geomean(v):
    return math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")


def compare(out, name, key, fields, ok_field):
    base = side_rows(out, name, "base", key, fields, ok_field)
    new = side_rows(out, name, "new", key, fields, ok_field)
    both = [k for k in new if k in base]
    ratios, bad = {label: [] for label, _ in fields}, 0
    print(f"-- {name}: {len(both)} rows in both (base {len(base)}, new {len(new)})")
    for k in both:
        b, n = base[k], new[k]
        ok = ok_field is None or (b.get(ok_field) and n.get(ok_field))
        bad += 0 if ok else 1
        cells = []
        for label, f in fields:
            if b.get(f) and n.get(f):
                ratios[label].append(n[f] / b[f])
                cells.append(f"{label} {b[f]:10.3f} -> {n[f]:10.3f} ({n[f] / b[f]:.3f})")
        print(f"  {str(k):48s} {'  '.join(cells)}{'' if ok else '  NOT CORRECT'}")
    parts = []
    for label, v in ratios.items():
        if v:
            parts.append(f"{name} {label} geomean {geomean(v):.3f} [{min(v):.3f}, {max(v):.3f}]")
            print(f"  {parts[-1]}")
    if bad:
        parts.append(f"{name}: {bad} rows not correct")
    return parts


def main():
    out = Path(sys.argv[1])
    summary = []
    for name, (key, fields, ok) in BENCHES.items():
        summary += compare(out, name, key, fields, ok)
    print("; ".join(summary) if summary else "no rows to compare")


if __name__ == "__main__":
    main()
