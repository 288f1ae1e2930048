# Stage `contention` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT, $FINAL_OUT): do the
# fused MoE kernel's CTAs contend for L2 bandwidth, and which SM clock does it run at?
#   RUN_NAME=contention ./run device contention
# 1. the build of CONTENTION_BUILD_DIR (default build-agent) when it has the xstage CLI, else its
#    own (build-contention) with the MoE and DiT tests (moe_build_and_test);
# 2. `xstage bench moe --profile --blocks B` for B in CONTENTION_BLOCKS (default "0 66": one CTA
#    per SM, then half as many) on CONTENTION_TOKENS (default 8192) and CONTENTION_ROUTING
#    (default uniform), while nvidia-smi samples the SM clock, power and throttle reasons
#    every 100 ms (read only: nothing is set);
# 3. one JSON, moe_contention.json: per configuration and block count the Interleaved time, its
#    consumers' shares (TMA waits, epilogue) and the SM clock sampled during that bench.
CB=${CONTENTION_BUILD_DIR:-$ROOT/build-agent}
if [ ! -x "$CB/xstage/cli/xstage" ]; then
  CB=$ROOT/build-contention
  moe_build_and_test contention "$CB"
fi
CT_LIMIT=${CONTENTION_LIMIT:-150}
REASONS=clocks_event_reasons.active  # the older drivers' name: clocks_throttle_reasons.active
nvidia-smi --query-gpu=$REASONS --format=csv >/dev/null 2>&1 || REASONS=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,$REASONS \
  --format=csv,nounits -lms 100 >"$OUT/contention_smi.csv" 2>&1 &
SMI_PID=$!
: >"$OUT/contention_spans.txt"
for b in ${CONTENTION_BLOCKS:-0 66}; do
  t0=$(date +%s.%N)
  step "contention_b$b" timeout "$CT_LIMIT" env XSTAGE_SOURCE_DIR="$ROOT" "$CB/xstage/cli/xstage" bench moe \
    --sweep one --tokens "${CONTENTION_TOKENS:-8192}" --routing "${CONTENTION_ROUTING:-uniform}" --profile \
    --blocks "$b" --warmup 1 --iters 5 --budget-s $((CT_LIMIT - 25)) --json "$OUT/moe_blocks_$b.json" --png ""
  echo "$b $t0 $(date +%s.%N)" >>"$OUT/contention_spans.txt"
done
kill "$SMI_PID" 2>/dev/null; wait "$SMI_PID" 2>/dev/null
python3 - "$OUT" "$FINAL_OUT/moe_contention.json" <<'PY'
import csv, datetime, json, os, statistics, sys
out, dst = sys.argv[1], sys.argv[2]
samples = []  # (unix time, sm MHz, max MHz, W, limit W, C, throttle)
with open(os.path.join(out, "contention_smi.csv")) as f:
    for rec in csv.reader(f):
        try:
            t = datetime.datetime.strptime(rec[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
            samples.append((t, float(rec[1]), float(rec[2]), float(rec[3]), float(rec[4]), float(rec[5]), rec[6].strip()))
        except (ValueError, IndexError):
            continue
runs, table = [], []
for line in open(os.path.join(out, "contention_spans.txt")):
    b, t0, t1 = line.split()
    path = os.path.join(out, f"moe_blocks_{b}.json")
    if not os.path.exists(path):
        continue
    doc = json.load(open(path))
    # nvidia-smi prints local time, which timestamp() reads as local: both are unix seconds.
    during = [s for s in samples if float(t0) <= s[0] <= float(t1)]
    busy = [s for s in during if s[3] > 250]  # samples while the GPU drew > 250 W (kernels running)
    clock = {"samples": len(during), "samples_over_250W": len(busy)}
    if busy:
        clock.update({"sm_mhz_median_over_250W": statistics.median(s[1] for s in busy),
                      "sm_mhz_min_over_250W": min(s[1] for s in busy),
                      "sm_mhz_max": max(s[2] for s in busy),
                      "power_w_median_over_250W": statistics.median(s[3] for s in busy),
                      "power_limit_w": busy[0][4],
                      "throttle_reasons_seen": sorted({s[6] for s in busy})})
    peak = max((s[2] for s in during), default=0)  # clocks.max.sm, the clock the profile's us assume
    rows = []
    for r in doc["rows"]:
        prof = r["interleaved_profile"]
        p = prof["consumer_share"]
        rows.append({k: r[k] for k in ("tokens_per_rank", "experts", "topk", "hidden", "intermediate", "routing",
                                       "interleaved_us", "tflops", "gemm_tflops", "correct")} |
                    {"stage_wait_share": p["stage_wait_in_mainloop"], "epilogue_share": p["epilogue"],
                     "mainloop_share": p["mainloop"],
                     # a consumer warpgroup's mean cycles (profiled launches) over the timed launches' event time
                     "consumer_cycles_per_launch": prof["total_us_at_peak_clock"] * peak,
                     "effective_sm_mhz": prof["total_us_at_peak_clock"] * peak / r["interleaved_us"] if peak else None})
    runs.append({"blocks": int(b) if int(b) > 0 else "one per SM", "command": doc["command"], "clock": clock,
                 "rows": rows})
    first = doc
res = {"card": first["card"], "gpus": first["gpus"], "date": first["date"],
       "command": "RUN_NAME=contention ./run device contention (scripts/device.d/contention.sh)", "runs": runs}
tmp = dst + ".tmp"
json.dump(res, open(tmp, "w"), indent=2)
os.replace(tmp, dst)
print(f"{'blocks':>10} {'E':>4} {'k':>2} {'hidden':>6} {'I':>5} {'IL us':>9} {'TFLOP/s':>8} {'tma%':>6} {'epi%':>6} {'MHz':>6}")
for run in runs:
    for r in run["rows"]:
        mhz = f"{r['effective_sm_mhz']:6.0f}" if r["effective_sm_mhz"] else f"{'-':>6}"
        print(f"{str(run['blocks']):>10} {r['experts']:4d} {r['topk']:2d} {r['hidden']:6d} {r['intermediate']:5d} "
              f"{r['interleaved_us']:9.1f} {r['tflops']:8.1f} {100 * r['stage_wait_share']:6.1f} "
              f"{100 * r['epilogue_share']:6.1f} {mhz}")
    print(f"{str(run['blocks']):>10} clock: {run['clock']}")
if len(runs) == 2:
    a, b = runs
    pairs = list(zip(a["rows"], b["rows"]))
    for what, key in (("time", "interleaved_us"), ("cycles", "consumer_cycles_per_launch")):
        rat = [y[key] / x[key] for x, y in pairs if x[key]]
        if rat:
            print(f"{what}({b['blocks']} CTAs) / {what}({a['blocks']}): median {statistics.median(rat):.3f}, "
                  f"min {min(rat):.3f}, max {max(rat):.3f}")
PY
