#!/usr/bin/env python3
"""Builds docs/results/gait.json from one run of the `gait` device stage.

    gait_results.py --runs DIR --previous docs/results/gait.json --out FILE
                    --card TEXT --date YYYY-MM-DD --command TEXT [--dataset TEXT] [--cmu-dataset TEXT]
                    [--data-version HASH] [--seed N] [--dev-dataset TEXT]
    gait_results.py --cpu-run DIR --previous F --out F --card TEXT --date YYYY-MM-DD --command TEXT
                    [--dataset TEXT]     (replaces the tiny CPU row, and cpu_infer_ms_per_seq
                                          from DIR/bench_infer.json when present)
    gait_results.py --speed FILE --previous F --out F --card TEXT --date D --command TEXT
                                         (the previous file with the training throughput of a
                                          `gait_speed` stage, its gait_speed.json; --speed also
                                          goes with --runs)
    --calibration-from GAIT_DATA_JSON --calibration-out FILE (with --runs): FILE is
        GAIT_DATA_JSON (docs/results/gait-data.json) with its `calibration` list rewritten:
        the generator's difficulty against real CASIA-B's (CALIBRATION_TARGETS), measured on
        the mean over runs of this generator version (this run alone when it is the first)

DIR holds one folder per variant, as scripts/device.d/gait.sh leaves them:
    DIR/<variant>/train_summary.json   (gait train: iterations done, train seconds)
    DIR/<variant>/eval/rank1.json      (gait eval: rank-1 NM/BG/CL)
    DIR/two_branch/eval_cmu/rank1.json (gait eval --test-all on the `--motion cmu` set)
    DIR/two_branch/eval_heads_<h>/rank1.json (gait eval --heads h --skeleton-scale 1: the same
                                       checkpoint's other test embeddings, h = fused_and_branches,
                                       fused, branches, silhouette, skeleton)
    DIR/two_branch/fusion/fusion_tuning.json (gait tune-fusion on the development set: the
                                       heads and skeleton scale the two_branch row uses)
Rows come only from files that exist: a variant without both files is listed under
"not_run" with the reason. The previous file's CPU rows and cpu_infer_ms_per_seq are
kept (its own card, date and command move into those rows), and so are its training
throughput keys (train_seq_per_s, baseline_gaitgl_seq_per_s, speed). The previous file's GPU run
moves into "previous_runs" (with its own earlier runs, newest first), and "mean_over_runs"
averages each variant over this run and the previous runs of the same generator version
(--data-version) when there are two or more, with the issue's comparisons on the means.
Prints a Markdown table.
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


def train_and_eval(folder):
    """(train_summary.json, eval/rank1.json, None) of a run folder, or (None, None, why)."""
    summ = load(os.path.join(folder, "train_summary.json"))
    ev = load(os.path.join(folder, "eval", "rank1.json"))
    for what, j in (("train_summary.json", summ), ("eval/rank1.json", ev)):
        if j is None:
            return None, None, f"no {what} in {folder} (training or evaluation did not finish)"
        if "__error__" in j:
            return None, None, j["__error__"]
    return summ, ev, None


def gpu_row(variant, runs):
    summ, ev, why = train_and_eval(os.path.join(runs, variant))
    if why:
        return None, why + f"; see {variant}*.log"
    row = {"variant": variant, "config": f"gait/configs/gpu-budget/{variant}.json", "device": ev.get("device", "?")}
    row.update(means(ev))
    row["epochs_or_iterations"] = summ["iterations"]
    row["planned_iterations"] = summ.get("planned_iterations")
    row["stopped_by_time"] = summ.get("stopped_by_time")
    row["train_seconds"] = summ["train_seconds"]
    row["eval_seconds"] = round(ev.get("embed_seconds", 0.0), 1)
    row["test_sequences"] = ev.get("sequences")
    if "heads" in ev:
        row["heads"] = ev["heads"]
        row["skeleton_scale"] = ev.get("skeleton_scale")
        row["fusion_tuned_on_dev_set"] = bool(ev.get("fusion_from"))
    return row, None


def gpu_run_of(doc):
    """The GPU run a results file holds (its GPU rows and provenance), or None."""
    rows = [r for r in doc.get("rows", []) if r.get("variant") in VARIANTS]
    if not rows:
        return None
    run = {k: doc[k] for k in ("card", "date", "command", "data_version", "seed", "dataset") if k in doc}
    run["rows"] = rows
    for k in ("cmu", "two_branch_heads", "two_branch_fusion", "issue_checks"):
        if k in doc:
            run[k] = doc[k]
    return run


def same_setup(a, b):
    """Two rows of one variant trained and evaluated alike (as far as the files say)."""
    return (a.get("planned_iterations") == b.get("planned_iterations") and
            bool(a.get("fusion_tuned_on_dev_set")) == bool(b.get("fusion_tuned_on_dev_set")))


def mean_over_runs(current, previous, version):
    """Per variant, the mean of NM/BG/CL over the runs of this generator version and
    dataset whose row of that variant has this run's setup (same_setup); None when no
    variant has two such runs."""
    if not version:
        return None
    runs = [current] + [r for r in previous if r.get("data_version") == version and
                        r.get("dataset", current.get("dataset")) == current.get("dataset")]
    if len(runs) < 2:
        return None
    rows = []
    for v in VARIANTS:
        mine = next((r2 for r2 in current["rows"] if r2.get("variant") == v), None)
        got = [r2 for run in runs for r2 in run["rows"] if r2.get("variant") == v and mine is not None and
               same_setup(r2, mine) and all(r2.get(c) is not None for c in CONDITIONS)]
        if len(got) >= 2:
            row = {"variant": v, "runs": len(got)}
            row.update({c: round(sum(r2[c] for r2 in got) / len(got), 2) for c in CONDITIONS})
            row.update({f"{c}_spread": round(max(r2[c] for r2 in got) - min(r2[c] for r2 in got), 2)
                        for c in CONDITIONS})
            rows.append(row)
    if not rows:
        return None
    return {"data_version": version, "runs": [{"date": r.get("date"), "seed": r.get("seed")} for r in runs],
            "rows": rows, "issue_checks": issue_checks(rows)}


def attach_spread(rows, mean):
    """Each GPU row gains the mean over runs of its variant and the spread between seeds
    (max - min per condition), where mean_over_runs has that variant."""
    by = {r["variant"]: r for r in mean["rows"]}
    for row in rows:
        m = by.get(row.get("variant"))
        if m:
            row["mean_over_runs"] = {c: m[c] for c in CONDITIONS} | {"runs": m["runs"]}
            row["seed_spread"] = {c: m[f"{c}_spread"] for c in CONDITIONS}


CPU_VARIANT = "two_branch_tiny_cpu"


def replace_cpu_row(args):
    """The previous file with its tiny-CPU row rebuilt from a `gait train` + `gait eval`
    of gait/configs/tiny-cpu.json (DIR/train_summary.json, DIR/eval/rank1.json)."""
    prev = load(args.previous) or {}
    if "__error__" in prev:
        sys.exit(prev["__error__"])
    summ, ev, why = train_and_eval(args.cpu_run)
    if why:
        sys.exit(why)
    old = next((r for r in prev.get("rows", []) if r.get("variant") == CPU_VARIANT), {})
    row = {"variant": CPU_VARIANT, "config": "gait/configs/tiny-cpu.json",
           "dataset": args.dataset or old.get("dataset", ""), **means(ev),
           "heads": ev.get("heads"), "epochs_or_iterations": summ["iterations"],
           "train_seconds": summ["train_seconds"], "eval_seconds": round(ev.get("embed_seconds", 0.0), 1),
           "card": args.card, "date": args.date, "command": args.command}
    if args.data_version:
        row["data_version"] = args.data_version
    out = dict(prev)
    out["rows"] = [r for r in prev.get("rows", []) if r.get("variant") != CPU_VARIANT] + [row]
    bench = load(os.path.join(args.cpu_run, "bench_infer.json"))  # gait bench-infer --json, if it ran
    if bench and "__error__" not in bench:
        out["cpu_infer_ms_per_seq"] = round(bench["median_ms"], 2)
        out["cpu_infer_note"] = (f"gait bench-infer --ckpt DIR/latest.gckpt --device cpu: {bench['frames']} frames, "
                                 f"batch 1, {bench['threads']} thread(s), median of {bench['runs']} runs "
                                 f"(p10 {bench['p10_ms']:.2f}, p90 {bench['p90_ms']:.2f}), the test embedding "
                                 f"{ev.get('heads', 'fused')}")
    return out


def build(args):
    prev = load(args.previous) or {}
    if "__error__" in prev:
        sys.exit(prev["__error__"])
    previous_runs = []
    prev_run = gpu_run_of(prev)
    if prev_run:
        previous_runs = [prev_run] + prev.get("previous_runs", [])
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
    if args.data_version:
        out["data_version"] = args.data_version
    if args.seed is not None:
        out["seed"] = args.seed
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
    heads = two_branch_heads(args.runs)
    if heads:
        out["two_branch_heads"] = heads
    tuning = fusion_tuning(args.runs, args.dev_dataset)
    if tuning:
        out["two_branch_fusion"] = tuning
    out["issue_checks"] = issue_checks(rows)
    if not_run:
        out["not_run"] = not_run
    current = {"date": args.date, "seed": args.seed, "dataset": args.dataset,
               "rows": [r for r in rows if r.get("variant") in VARIANTS]}
    mean = mean_over_runs(current, previous_runs, args.data_version)
    if mean:
        out["mean_over_runs"] = mean
        attach_spread(out["rows"], mean)
    if previous_runs:
        out["previous_runs"] = previous_runs[:4]
    for k in ("cpu_infer_ms_per_seq", "cpu_infer_note") + SPEED_KEYS:
        if k in prev:
            out[k] = prev[k]
    return out


SPEED_KEYS = ("train_seq_per_s", "baseline_gaitgl_seq_per_s", "speed")

# Real CASIA-B's difficulty profile, which the generator is calibrated to: (model, quantity)
# -> (target, tolerance). GaitGL (Lin et al., ICCV 2021) for the silhouette CNN, GaitGraph
# with HRNet poses (Teepe et al., ICIP 2021) for the natural-graph skeleton GCN; NM is
# rank-1 on NM, the gaps are NM - BG and NM - CL.
CALIBRATION_TARGETS = {
    ("silhouette_only", "NM"): (97.4, 3.0), ("silhouette_only", "NM_minus_BG"): (2.9, 2.0),
    ("silhouette_only", "NM_minus_CL"): (13.8, 3.0),
    ("skeleton_only_natural", "NM"): (87.7, 5.0), ("skeleton_only_natural", "NM_minus_BG"): (12.9, 4.0),
    ("skeleton_only_natural", "NM_minus_CL"): (21.4, 5.0),
}


def calibration(out):
    """The calibration table of a results file: [{model, quantity, measured, target,
    tolerance, within}], on mean_over_runs when there is one, else on this run's rows,
    and where the figures come from."""
    mean = out.get("mean_over_runs")
    source = mean["rows"] if mean else out.get("rows", [])
    by = {r["variant"]: r for r in source if all(r.get(c) is not None for c in CONDITIONS)}
    table_rows = []
    for (model, quantity), (target, tol) in CALIBRATION_TARGETS.items():
        r = by.get(model)
        if r is None:
            measured = None
        elif quantity == "NM":
            measured = r["NM"]
        else:
            measured = r["NM"] - r[quantity.split("_minus_")[1]]
        table_rows.append({"model": model, "quantity": quantity,
                           "measured": None if measured is None else round(measured, 2), "target": target,
                           "tolerance": tol, "difference": None if measured is None else round(measured - target, 2),
                           "within": None if measured is None else abs(measured - target) <= tol})
    runs = mean["runs"] if mean else [{"date": out.get("date"), "seed": out.get("seed")}]
    return table_rows, {"runs": runs, "data_version": out.get("data_version"), "card": out.get("card"),
                        "command": out.get("command"),
                        "on": "mean_over_runs of docs/results/gait.json" if mean else "this run's rows"}


def write_calibration(out, src, dst):
    doc = load(src) or {}
    if "__error__" in doc:
        sys.exit(doc["__error__"])
    doc = dict(doc)
    doc["calibration"], doc["calibration_source"] = calibration(out)
    tmp = dst + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(tmp, dst)
    lines = ["", "| calibration | measured | target | difference | within |", "|---|---|---|---|---|"]
    for r in doc["calibration"]:
        lines.append(f"| {r['model']} {r['quantity']} | {fmt(r['measured'])} | {r['target']} ± {r['tolerance']} | "
                     f"{fmt(r['difference'], '{:+.2f}')} | {r['within']} |")
    return "\n".join(lines)


def merge_speed(out, path):
    """out with the keys of a gait_speed.json (scripts/gait_speed_results.py): the
    headline throughputs at the top level, the rows and their provenance under "speed"."""
    s = load(path)
    if not s or "__error__" in s:
        sys.exit((s or {}).get("__error__", f"{path}: not found"))
    out = dict(out)
    out["train_seq_per_s"] = s.get("train_seq_per_s", {})
    out["baseline_gaitgl_seq_per_s"] = s.get("baseline_gaitgl_seq_per_s")
    out["speed"] = {k: s[k] for k in ("card", "date", "command", "warmup_steps", "ratio_to_baseline", "rows",
                                      "phases", "problems") if k in s}
    return out


CONDITIONS = ("NM", "BG", "CL")
HEADS = ("fused_and_branches", "fused", "branches", "silhouette", "skeleton")  # folder names (+ -> _and_)


def two_branch_heads(runs):
    """The two-branch checkpoint evaluated on each test embedding: its config's (the row
    above, usually fused+branches) and those of `gait eval --heads`; [] if none ran."""
    out = []
    for h, path in [(None, os.path.join(runs, "two_branch", "eval", "rank1.json"))] + \
            [(h, os.path.join(runs, "two_branch", f"eval_heads_{h}", "rank1.json")) for h in HEADS]:
        j = load(path)
        if j and "__error__" not in j:
            out.append({"heads": j.get("heads", (h or "fused").replace("_and_", "+")),
                        "skeleton_scale": j.get("skeleton_scale"), "tuned": bool(j.get("fusion_from")),
                        "from_config": h is None, **means(j)})
    return out if len(out) > 1 else []


def fusion_tuning(runs, dev_dataset):
    """gait tune-fusion's choice for two_branch on the development set, or None."""
    j = load(os.path.join(runs, "two_branch", "fusion", "fusion_tuning.json"))
    if not j or "__error__" in j:
        return None
    return {"dataset": dev_dataset or j.get("development_data"), "subjects": j.get("development_subjects"),
            "sequences": j.get("sequences"), "best": j.get("best"), "rows": j.get("rows")}


def issue_checks(rows):
    """The model's claims as comparisons of variants (does each part earn its place), from
    the GPU rows of this run (None where a row is missing).

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
    if out.get("two_branch_heads"):
        lines += ["", "| two_branch test embedding | NM | BG | CL |", "|---|---|---|---|"]
        for h in out["two_branch_heads"]:
            scale = h.get("skeleton_scale")
            name = h["heads"] + ("" if scale is None or h["heads"] in ("fused", "silhouette", "skeleton")
                                 else f" x{scale:g}")
            name += " (tuned on the dev set: the row above)" if h.get("tuned") else (
                " (its config's)" if h["from_config"] else "")
            lines.append(f"| {name} | {fmt(h.get('NM'))} | {fmt(h.get('BG'))} | {fmt(h.get('CL'))} |")
    if out.get("two_branch_fusion"):
        b = out["two_branch_fusion"]["best"] or {}
        lines += ["", f"tune-fusion on the dev set: best {b.get('heads')} x{b.get('skeleton_scale')} "
                      f"(dev NM {fmt(b.get('NM'))} BG {fmt(b.get('BG'))} CL {fmt(b.get('CL'))})"]
    lines += check_lines(out.get("issue_checks", {}))
    mean = out.get("mean_over_runs")
    if mean:
        lines += ["", f"mean over {len(mean['runs'])} runs of generator {mean['data_version']} "
                  f"(seeds {', '.join(str(r['seed']) for r in mean['runs'])}):",
                  "| variant | NM | BG | CL | spread NM/BG/CL |", "|---|---|---|---|---|"]
        for r in mean["rows"]:
            lines.append(f"| {r['variant']} | {fmt(r['NM'])} | {fmt(r['BG'])} | {fmt(r['CL'])} | "
                         f"{fmt(r['NM_spread'])}/{fmt(r['BG_spread'])}/{fmt(r['CL_spread'])} |")
        lines += [l.replace("check ", "check mean ", 1) for l in check_lines(mean["issue_checks"])]
    if out.get("train_seq_per_s"):
        t, base = out["train_seq_per_s"], out.get("baseline_gaitgl_seq_per_s")
        lines += ["", "training sequences/s: " + ", ".join(f"{k} {fmt(v, '{:.0f}')}" for k, v in t.items()) +
                  f"; PyTorch eager GaitGL {fmt(base, '{:.0f}')} ({out.get('speed', {}).get('date', '?')})"]
    return "\n".join(lines)


def check_lines(checks):
    lines = []
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
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs")
    p.add_argument("--cpu-run", help="a tiny-cpu run folder: replace only the CPU row")
    p.add_argument("--previous", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--card", required=True)
    p.add_argument("--date", required=True)
    p.add_argument("--command", required=True)
    p.add_argument("--dataset", default="")
    p.add_argument("--cmu-dataset", default="")
    p.add_argument("--data-version", default="")
    p.add_argument("--dev-dataset", default="")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--speed", help="a gait_speed.json: its training throughput joins the file")
    p.add_argument("--calibration-from", help="docs/results/gait-data.json, whose calibration list is rewritten")
    p.add_argument("--calibration-out", help="where that file goes")
    args = p.parse_args()
    if bool(args.calibration_from) != bool(args.calibration_out) or (args.calibration_from and not args.runs):
        p.error("--calibration-from and --calibration-out go together, with --runs")
    if args.runs and args.cpu_run or not (args.runs or args.cpu_run or args.speed):
        p.error("give one of --runs (a GPU stage's folder) and --cpu-run (a tiny-cpu run), or --speed alone")
    if args.runs:
        out = build(args)
    elif args.cpu_run:
        out = replace_cpu_row(args)
    else:
        out = load(args.previous) or {}
        if "__error__" in out:
            sys.exit(out["__error__"])
    if args.speed:
        out = merge_speed(out, args.speed)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    os.replace(tmp, args.out)
    print(table(out))
    if args.calibration_from:
        print(write_calibration(out, args.calibration_from, args.calibration_out))


if __name__ == "__main__":
    main()
