# Stage `route` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT, $FINAL_OUT):
# the fused MoE with routing, layout and tile order on the GPU (FusedMoe::route_on_device)
# and its effect on the DiT MoE FFN, on this machine's first GPU(s).
#   RUN_NAME=route ./run device route
# 1. own build (build-route): the xstage CLI, the MoE and DiT tests;
# 2. CPU tests; GPU tests: the MoE kernel's (every fused case, the routing kernels against
#    the host layout and schedulers for P = 1..8, device- vs host-routed forwards) and
#    the DiT's (single GPU vs the CPU reference, GPU vs host routing);
# 3. `xstage dit --preset dit-moe` at P = 1 with ROUTE_BLOCKS blocks (default 28, the
#    whole preset), --moe-routing device and host in turns (d h d h), rows into
#    $OUT/dit_routing.json; with nsys (ROUTE_NSYS=1, default) the kernel times of one
#    step in each mode; then a short table (ROUTE_DIT_TURNS: the modes in order);
# 4. optional: the MoE bench from router logits (ROUTE_MOE_TOKENS, see below).
ROUTE_T0=$(date +%s)
RB=${ROUTE_BUILD_DIR:-$ROOT/build-route}
RT="$RB/xstage/tests"
RX="$RB/xstage/cli/xstage"
step route_configure timeout 90 cmake -S "$ROOT" -B "$RB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_CUDA=ON \
  -DXSTAGE_BUILD_GAIT=OFF
step route_build timeout 300 cmake --build "$RB" -j "$(nproc)" --target xstage xstage_moe_tests xstage_moe_gpu_tests \
  xstage_dit_tests xstage_dit_gpu_tests
step route_cpu_tests timeout 60 sh -c "'$RT/xstage_moe_tests' && '$RT/xstage_dit_tests'"
step route_moe_gpu_tests timeout 240 "$RT/xstage_moe_gpu_tests"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|skipped" "$OUT/route_moe_gpu_tests.log" 2>/dev/null | head -20
step route_dit_gpu_tests timeout 200 env XSTAGE_SOURCE_DIR="$ROOT" "$RT/xstage_dit_gpu_tests"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|routing:|velocity vs" "$OUT/route_dit_gpu_tests.log" 2>/dev/null | head -20
rm -f "$OUT"/dit_routing*.json
i=0
for turn in ${ROUTE_DIT_TURNS:-device host device host}; do
  i=$((i + 1))
  # SM clock and power while it runs (read only), 50 ms apart.
  nvidia-smi -i 0 --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 50 \
    >"$OUT/clocks_${i}_$turn.csv" 2>/dev/null &
  smi=$!
  step "route_dit_moe_${i}_$turn" timeout 120 env XSTAGE_SOURCE_DIR="$ROOT" "$RX" dit --quiet \
    --json "$OUT/dit_routing_${i}.json" --preset dit-moe --tokens 4096 --steps 2 --blocks "${ROUTE_BLOCKS:-28}" \
    --gpus 1 --samples 7 --moe-routing "$turn"
  kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
  grep -h "MoE FFN" "$OUT/route_dit_moe_${i}_$turn.log"
  python3 - "$OUT/clocks_${i}_$turn.csv" <<'PY'
import sys
rows = []
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(",")]
    try: rows.append((float(f[1]), float(f[2]), float(f[3])))
    except (ValueError, IndexError): pass
busy = [r for r in rows if r[1] > 250]  # samples while the GPU works
if busy:
    n = len(busy)
    print(f"  clocks while busy (> 250 W, {n} of {len(rows)} samples): SM {sum(r[0] for r in busy)/n:.0f} MHz "
          f"(min {min(r[0] for r in busy):.0f}), power {sum(r[1] for r in busy)/n:.0f} W (max {max(r[1] for r in busy):.0f}), "
          f"{max(r[2] for r in busy):.0f} C max")
PY
done
# Kernel times per mode (nsys, when present): one timed step after one warm-up.
if [ "${ROUTE_NSYS:-1}" = 1 ] && command -v nsys >/dev/null; then
  for turn in device host; do
    step "route_nsys_$turn" timeout 120 nsys profile -o "$OUT/nsys_$turn" --force-overwrite true -t cuda \
      env XSTAGE_SOURCE_DIR="$ROOT" "$RX" dit --quiet --preset dit-moe --tokens 4096 --steps 1 \
      --blocks "${ROUTE_BLOCKS:-28}" --gpus 1 --warmup 1 --samples 2 --moe-routing "$turn"
    nsys stats --report cuda_gpu_kern_sum --format csv --output "$OUT/kern_$turn" "$OUT/nsys_$turn.nsys-rep" \
      >"$OUT/nsys_stats_$turn.log" 2>&1 || true
    rm -f "$OUT/nsys_$turn.nsys-rep" "$OUT/nsys_$turn.sqlite"
  done
else
  note route_nsys "skipped (no nsys or ROUTE_NSYS=0)"
fi
python3 "$ROOT/scripts/merge_run_rows.py" "$OUT/dit_routing.json" \
  "RUN_NAME=route ./run device route (scripts/device.d/route.sh): four xstage dit runs, rows in run order" \
  "$OUT"/dit_routing_*.json
python3 - "$OUT" <<'PY' | tee "$OUT/route_table.txt"
import csv, glob, json, os, sys
out = sys.argv[1]
merged = os.path.join(out, "dit_routing.json")
rows = json.load(open(merged))["rows"] if os.path.exists(merged) else []
if rows:
    print("---- xstage dit --preset dit-moe, P = 1 (ms per Euler step), in run order ----")
    for r in rows:
        print(f"{r['preset']:<8} {r['tokens']:>6} blocks {r['blocks']:>3} routing {r.get('moe_routing', '?'):<6} "
              f"single {r['single_step_ms']:.3f} ms")
for turn in ("device", "host"):
    for f in glob.glob(os.path.join(out, f"kern_{turn}*.csv")):
        print(f"---- nsys kernels, {turn} routing (top 8 by total time) ----")
        with open(f) as fh:
            rd = list(csv.DictReader(fh))
        for r in rd[:8]:
            name = r.get("Name", "?")[:70]
            print(f"{float(r.get('Total Time (ns)', 0)) / 1e6:9.3f} ms {r.get('Instances', '?'):>6} x "
                  f"{float(r.get('Avg (ns)', 0)) / 1e3:9.1f} us  {name}")
        for r in rd:
            if "route" in r.get("Name", ""):
                print(f"  planner: {float(r.get('Total Time (ns)', 0)) / 1e6:8.3f} ms {r.get('Instances', '?'):>6} x "
                      f"{float(r.get('Avg (ns)', 0)) / 1e3:8.1f} us  {r.get('Name', '?')[:70]}")
PY
[ -f "$OUT/dit_routing.json" ] && cp "$OUT/dit_routing.json" "$FINAL_OUT/dit_routing.json"
# 4. with ROUTE_MOE_TOKENS (e.g. 2048,8192): `xstage bench moe --sweep one` at those
#    tokens per rank with --device-routing (the forward from router logits, its planner)
#    -> moe_from_logits.json.
if [ -n "${ROUTE_MOE_TOKENS:-}" ]; then
  step route_moe_logits timeout "${ROUTE_MOE_LIMIT:-300}" env XSTAGE_SOURCE_DIR="$ROOT" "$RX" bench moe \
    --sweep "${ROUTE_MOE_SWEEP:-one}" --tokens "$ROUTE_MOE_TOKENS" --device-routing --warmup 1 --iters 5 \
    --budget-s $(( ${ROUTE_MOE_LIMIT:-300} - 30 )) --json "$OUT/moe_from_logits.json" --png "$OUT/moe_from_logits.png"
  for f in moe_from_logits.json moe_from_logits.png; do [ -f "$OUT/$f" ] && cp "$OUT/$f" "$FINAL_OUT/"; done
  echo "---- bench moe (us; logits = the forward from router logits, plan = its GPU planner, eq = bitwise) ----"
  grep -E "^ +T |^ +[0-9]+ +[0-9]+ |geometric|budget" "$OUT/route_moe_logits.log" | head -60
  [ -f "$OUT/moe_from_logits.json" ] && python3 - "$OUT/moe_from_logits.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("---- planner phases (us per call): topk gather count scan order assign | sum, planner ----")
for r in d["rows"]:
    f = r.get("from_logits", {})
    ph = f.get("planner_phase_us")
    if not ph: continue
    v = [ph[k] for k in ("topk", "allgather", "count", "scan", "order", "assign")]
    print(f"{r['tokens_per_rank']:5d} {r['experts']:4d} {r['topk']} {r['hidden']:5d} {r['intermediate']:5d} {r['routing'][:4]} | "
          + " ".join(f"{x:6.1f}" for x in v) + f" | {sum(v):6.1f} {f['planner_us']:6.1f}")
PY
fi
note route_stage "$(( $(date +%s) - ROUTE_T0 )) s"
