#!/usr/bin/env python3
"""Builds docs/results/gait.json from one run of the `gait` device stage.

    gait_results.py --runs DIR --previous docs/results/gait.json --out FILE
                    --card TEXT --date YYYY-MM-DD --command TEXT [--dataset TEXT] [--cmu-dataset TEXT]

DIR holds one folder per variant, as scripts/device.d/gait.sh leaves them:
    DIR/<variant>/train_summary.json   (gait train: iterations done, train seconds)
    DIR/<variant>/eval/rank1.json      (gait eval: rank-1 NM/BG/CL)
    DIR/two_branch/eval_cmu/rank1.json (gait eval --test-all on the `--motion cmu` set)
Rows come only from files that exist: a variant without both files is listed under
"not_run" with the reason. The previous file's CPU rows and cpu_infer_ms_per_seq are
kept (its own card, date and command move into those rows). Prints a Markdown table.
"""
import argparse
import json
import os
import sys

VARIANTS = ["silhouette_only", "skeleton_only_natural", "skeleton_only_fc", "skeleton_only_fc_stcatt", "two_branch"]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return None if isinstance(e, FileNotFoundError) else {"__error__": f"{path}: {e}"}


def means(rank1):
    r = rank1.get("rank1", {})
    return {c: (r.get(c) or {}).get("mean") for c in ("NM", "BG", "CL")}


def gpu_row(variant, runs):
    summ = load(os.path.join(runs, variant, "train_summary.json"))
    ev = load(os.path.join(runs, variant, "eval", "rank1.json"))
    for what, j in (("train_summary.json", summ), ("eval/rank1.json", ev)):
        if j is None:
            return None, f"no {what} (training or evaluation did not finish; see {variant}/*.log)"
        if "__error__" in j:
            return None, j["__error__"]
    row = {"variant": variant, "config": f"gait/configs/gpu-budget/{variant}.json", "device": ev.get("device", "?")}
    row.update(means(ev))
    row["epochs_or_iterations"] = summ["iterations"]
    row["planned_iterations"] = summ.get("planned_iterations")
    row["stopped_by_time"] = summ.get("stopped_by_time")
    row["train_seconds"] = summ["train_seconds"]
    row["eval_seconds"] = round(ev.get("embed_seconds", 0.0), 1)
    row["test_sequences"] = ev.get("sequences")
    return row, None


def build(args):
    prev = load(args.previous) or {}
    if "__error__" in prev:
        sys.exit(prev["__error__"])
    rows, not_run = [], []
    for v in VARIANTS:
        row, why = gpu_row(v, args.runs)
        if row:
            rows.append(row)
        else:
            not_run.append({"variant": v, "why": why})
    # Earlier rows that are not GPU variants (the CPU tiny run) stay, with their provenance.
    for r in prev.get("rows", []):
        if r.get("variant") in VARIANTS:
            continue
        r = dict(r)
        for k in ("card", "date", "command"):
            if k in prev and k not in r:
                r[k] = prev[k]
        rows.append(r)
    out = {"card": args.card, "date": args.date, "command": args.command}
    if args.dataset:
        out["dataset"] = args.dataset
    out["rows"] = rows
    cmu = load(os.path.join(args.runs, "two_branch", "eval_cmu", "rank1.json"))
    if cmu and "__error__" not in cmu:
        out["cmu"] = {"variant": "two_branch", "trained_iterations": cmu.get("iteration"),
                      "dataset": args.cmu_dataset or cmu.get("data"), **means(cmu),
                      "test_sequences": cmu.get("sequences"), "eval_seconds": round(cmu.get("embed_seconds", 0.0), 1)}
    else:
        not_run.append({"variant": "two_branch on the cmu set",
                        "why": (cmu or {}).get("__error__", "no two_branch/eval_cmu/rank1.json")})
    out["issue_checks"] = issue_checks(rows)
    if not_run:
        out["not_run"] = not_run
    for k in ("cpu_infer_ms_per_seq", "cpu_infer_note"):
        if k in prev:
            out[k] = prev[k]
    return out


CONDITIONS = ("NM", "BG", "CL")


def issue_checks(rows):
    """Issue 5's comparisons, from the GPU rows of this run (None where a row is missing).

    The two-branch model's skeleton half is the FC + STC-Att GCN, so its single-branch
    counterparts are silhouette_only and skeleton_only_fc_stcatt."""
    by = {r["variant"]: r for r in rows if r.get("variant") in VARIANTS and all(c in r for c in CONDITIONS)}

    def better(a, b):
        if a not in by or b not in by:
            return None
        return {c: round(by[a][c] - by[b][c], 2) for c in CONDITIONS}

    def all_positive(d):
        return None if d is None else all(v > 0 for v in d.values())

    out = {}
    for name, (a, b) in {"two_branch_over_silhouette_only": ("two_branch", "silhouette_only"),
                         "two_branch_over_skeleton_only_fc_stcatt": ("two_branch", "skeleton_only_fc_stcatt"),
                         "fc_over_natural_graph": ("skeleton_only_fc", "skeleton_only_natural"),
                         "stcatt_over_fc": ("skeleton_only_fc_stcatt", "skeleton_only_fc")}.items():
        d = better(a, b)
        out[name] = {"gain": d, "all_positive": all_positive(d)}
    g = out["two_branch_over_silhouette_only"]["gain"]
    # "Its gain is largest on CL" presupposes gains: a CL loss that is merely the smallest
    # loss does not count.
    out["largest_gain_over_silhouette_on_CL"] = None if g is None else (
        g["CL"] > 0 and g["CL"] > max(g["NM"], g["BG"]))
    return out


def fmt(v, spec="{:.2f}"):
    return "-" if v is None else spec.format(v)


def table(out):
    lines = ["| variant | NM | BG | CL | iterations | train s |", "|---|---|---|---|---|---|"]
    for r in out["rows"]:
        lines.append(f"| {r['variant']} | {fmt(r.get('NM'))} | {fmt(r.get('BG'))} | {fmt(r.get('CL'))} | "
                     f"{r.get('epochs_or_iterations', '-')} | {fmt(r.get('train_seconds'), '{:.1f}')} |")
    if "cmu" in out:
        c = out["cmu"]
        lines.append(f"| two_branch on cmu walkers | {fmt(c.get('NM'))} | {fmt(c.get('BG'))} | {fmt(c.get('CL'))} | "
                     f"{c.get('trained_iterations', '-')} | |")
    for n in out.get("not_run", []):
        lines.append(f"| {n['variant']} | not run: {n['why']} | | | | |")
    checks = out.get("issue_checks", {})
    if checks:
        lines.append("")
        for name, v in checks.items():
            if isinstance(v, dict):
                gain = v["gain"]
                text = "n/a (a row is missing)" if gain is None else (
                    " ".join(f"{c} {gain[c]:+.2f}" for c in CONDITIONS) + f" -> all better: {v['all_positive']}")
            else:
                text = "n/a" if v is None else str(v)
            lines.append(f"check {name}: {text}")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", required=True)
    p.add_argument("--previous", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--card", required=True)
    p.add_argument("--date", required=True)
    p.add_argument("--command", required=True)
    p.add_argument("--dataset", default="")
    p.add_argument("--cmu-dataset", default="")
    args = p.parse_args()
    out = build(args)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    os.replace(tmp, args.out)
    print(table(out))


if __name__ == "__main__":
    main()
