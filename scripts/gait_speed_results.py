#!/usr/bin/env python3
"""The `gait_speed` stage's results: training throughput of `gait train` (from each
run's train_log.csv, one row per step) and of the PyTorch eager GaitGL baseline (its
JSON), the same warm-up left out of both, into one JSON and one Markdown table.

  gait_speed_results.py --runs DIR --warmup N --out gait_speed.json [--card TEXT --date D --command CMD]

DIR holds run_<variant>/train_log.csv and run_<variant>/config.json (the trainer's
resolved config: the batch, with each row's seq_per_s, gives the step's time), optionally
prof_<variant>/train_summary.json (a trainer.profile_phases run: where a step's time
goes), and gaitgl_<local>.json. sequences/s = batch / mean step over the counted steps;
the median step is in ms. Keys for docs/results/gait.json: train_seq_per_s
{silhouette_only, two_branch} and baseline_gaitgl_seq_per_s (the per-strip form).
"""
import argparse
import csv
import json
import os
import statistics
import sys

VARIANTS = ("silhouette_only", "two_branch")


def phase_profile(runs, variant):
    """Median ms per phase of a trainer.profile_phases run, or None."""
    try:
        with open(os.path.join(runs, f"prof_{variant}", "train_summary.json")) as f:
            s = json.load(f)
        return {"phase_median_ms": s["phase_median_ms"], "steps": s["phase_steps"]}
    except (OSError, ValueError, KeyError):
        return None


def train_row(path, warmup, batch):
    """A `gait train` log -> seq/s, median/p10/p90 step ms over the steps after warm-up."""
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if int(r["iteration"]) > warmup]
    if not rows:
        raise ValueError(f"{path}: no logged step after the warm-up of {warmup}")
    steps_ms = [1e3 * batch / float(r["seq_per_s"]) for r in rows]
    q = statistics.quantiles(steps_ms, n=10, method="inclusive") if len(steps_ms) >= 2 else [steps_ms[0]] * 9
    mean = sum(steps_ms) / len(steps_ms)
    return {"seq_per_s": batch / (mean / 1e3), "median_step_ms": statistics.median(steps_ms),
            "p10_step_ms": q[0], "p90_step_ms": q[-1], "timed_steps": len(steps_ms)}


def graphs_of(run_dir):
    """CUDA graphs the run captured (train_summary.json), or None."""
    try:
        with open(os.path.join(run_dir, "train_summary.json")) as f:
            return json.load(f)["cuda_graphs"]
    except (OSError, ValueError, KeyError):
        return None


def batch_of(run_dir):
    """P*K and the clip length from the config the trainer wrote (its resolved config)."""
    with open(os.path.join(run_dir, "config.json")) as f:
        cfg = json.load(f)
    return cfg["trainer"]["batch_p"] * cfg["trainer"]["batch_k"], cfg["data"]["clip_length"]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", required=True)
    ap.add_argument("--warmup", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--card", default="")
    ap.add_argument("--date", default="")
    ap.add_argument("--command", default="")
    a = ap.parse_args(argv)
    rows, problems = {}, []
    for v in VARIANTS:
        d = os.path.join(a.runs, f"run_{v}")
        try:
            batch, frames = batch_of(d)
            rows[v] = dict(train_row(os.path.join(d, "train_log.csv"), a.warmup, batch), batch=batch, frames=frames,
                           precision="bf16 autocast" if "cpu" not in a.card.lower() else "fp32 (CPU)")
        except (OSError, ValueError, KeyError) as e:
            problems.append(f"{v}: {e}")
    for local in ("loop", "fold"):
        try:
            with open(os.path.join(a.runs, f"gaitgl_{local}.json")) as f:
                r = json.load(f)
            rows[f"gaitgl_eager_{local}"] = {k: r[k] for k in ("seq_per_s", "median_step_ms", "p10_step_ms",
                                                               "p90_step_ms", "timed_steps", "frames")}
            rows[f"gaitgl_eager_{local}"].update(batch=r["batch_p"] * r["batch_k"], precision=r["precision"])
        except (OSError, ValueError, KeyError) as e:
            problems.append(f"gaitgl {local}: {e}")
    base = rows.get("gaitgl_eager_loop", {}).get("seq_per_s")
    out = {
        "card": a.card, "date": a.date, "command": a.command, "warmup_steps": a.warmup, "rows": rows,
        "train_seq_per_s": {v: rows[v]["seq_per_s"] for v in VARIANTS if v in rows},
        "baseline_gaitgl_seq_per_s": base,
        "ratio_to_baseline": {v: rows[v]["seq_per_s"] / base for v in VARIANTS if v in rows and base},
        "cuda_graphs": {v: n for v in VARIANTS if (n := graphs_of(os.path.join(a.runs, f"run_{v}"))) is not None},
        "phases": {v: p for v in VARIANTS if (p := phase_profile(a.runs, v))},
        "problems": problems,
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print("| run | batch | frames | precision | seq/s | median step ms | p10 | p90 | steps | x baseline |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        ratio = f"{r['seq_per_s'] / base:.2f}" if base else "-"
        print(f"| {name} | {r['batch']} | {r['frames']} | {r['precision']} | {r['seq_per_s']:.1f} | "
              f"{r['median_step_ms']:.2f} | {r['p10_step_ms']:.2f} | {r['p90_step_ms']:.2f} | {r['timed_steps']} | {ratio} |")
    for v, p in out["phases"].items():
        print(f"phases {v} (median ms of {p['steps']} synchronised steps): "
              + ", ".join(f"{k} {x:.2f}" for k, x in p["phase_median_ms"].items()))
    for v, n in out["cuda_graphs"].items():
        print(f"cuda graphs {v}: {n} captured")
    for p in problems:
        print(f"problem: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
