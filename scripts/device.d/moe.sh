# Stage `moe` of scripts/device.sh (sourced; uses step/note, $ROOT, $OUT, $FINAL_OUT):
# the fused EP MoE kernel on the GPUs of this machine, within
# MOE_BUDGET_S seconds of wall time (default 470, for an 8-minute slot).
#   RUN_NAME=moe ./run device moe
# 1. its own build (build-moe, -j nproc): the MoE tests first, then the xstage CLI
#    in the background while the tests run;
# 2. CPU tests, then GPU tests (fused vs the host reference, 2 ranks; FourRanks
#    skips on fewer than 4 GPUs);
# 3. SASS check of moe_fused_kernel: HGMMA present, no LDL/STL (local memory),
#    no "wgmma serialised" ptxas warning in the build log;
# 4. `xstage bench moe` over the EP = MOE_EP part of the standard sweep (default: 2,
#    4 or 8, the most the visible GPUs allow), as many rows as
#    the remaining time allows (--budget-s; the JSON is rewritten after each
#    row), writing $OUT/moe.json (docs/results/moe.json format) and the PNG;
# 5. a short table of the bench rows.
MOE_T0=$(date +%s)
MOE_BUDGET=${MOE_BUDGET_S:-470}
moe_left() { echo $((MOE_BUDGET - ($(date +%s) - MOE_T0))); }
MB=${MOE_BUILD_DIR:-$ROOT/build-moe}
MT="$MB/xstage/tests"

step moe_configure timeout 120 cmake -S "$ROOT" -B "$MB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_CUDA=ON \
  -DXSTAGE_BUILD_GAIT=OFF
step moe_build timeout $(( $(moe_left) > 330 ? 300 : $(moe_left) - 30 )) \
  cmake --build "$MB" -j "$(nproc)" --target xstage_moe_tests xstage_moe_gpu_tests
# The CLI (every module, attention kernels included) builds while the tests run.
MOE_CLI_LIMIT=$(( $(moe_left) > 360 ? 300 : $(moe_left) - 60 ))
( timeout "$MOE_CLI_LIMIT" cmake --build "$MB" -j "$(nproc)" --target xstage >"$OUT/moe_build_cli.log" 2>&1
  echo $? >"$OUT/moe_build_cli.rc" ) &
MOE_CLI_PID=$!
step moe_cpu_tests timeout 60 "$MT/xstage_moe_tests"
MOE_GPU_OK=1
step moe_gpu_tests env XSTAGE_PRINT_CONFIG=1 timeout 150 "$MT/xstage_moe_gpu_tests" || MOE_GPU_OK=0
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|bad of|timed out" "$OUT/moe_gpu_tests.log" 2>/dev/null | head -20

wait "$MOE_CLI_PID"
note moe_build_cli "rc=$(cat "$OUT/moe_build_cli.rc" 2>/dev/null || echo '?') (limit ${MOE_CLI_LIMIT}s; see moe_build_cli.log)"

# SASS: the kernel must use wgmma (HGMMA) and no local memory (LDL/STL).
if [ -f "$MB/xstage/moe/libxs_moe.a" ]; then
  cuobjdump --dump-resource-usage "$MB/xstage/moe/libxs_moe.a" >"$OUT/moe_resource_usage.log" 2>&1
  cuobjdump --dump-sass "$MB/xstage/moe/libxs_moe.a" >"$OUT/moe.sass" 2>&1
  awk '/Function : /{f=($3 ~ /moe_fused_kernel/)} f&&/HGMMA/{h++} f&&/(LDL|STL)/{l++}
       END{printf "HGMMA=%d LDL/STL=%d\n", h+0, l+0}' "$OUT/moe.sass" >"$OUT/moe_sass_check.log"
  serial=$(cat "$OUT/moe_build.log" "$OUT/moe_build_cli.log" 2>/dev/null | grep -c "C7510\|serializ" || true)
  if grep -q "HGMMA=0\|LDL/STL=[1-9]" "$OUT/moe_sass_check.log" || [ "${serial:-0}" != 0 ]; then
    note moe_sass "FAILED $(cat "$OUT/moe_sass_check.log") wgmma-serialised-warnings=${serial:-0}"
  else
    note moe_sass "ok $(cat "$OUT/moe_sass_check.log")"
  fi
else
  note moe_sass "skipped (no libxs_moe.a)"
fi

# Bench: the rows of the standard sweep at EP = MOE_EP (default: the most ranks of
# 2, 4, 8 that the visible GPUs allow) for the time that is left (60 s kept for the row in flight, the table and the archive).
MOE_XS="$MB/xstage/cli/xstage"
MOE_NGPU=$(nvidia-smi -L 2>/dev/null | grep -c GPU || echo 0)
MOE_EP=${MOE_EP:-$( [ "$MOE_NGPU" -ge 8 ] && echo 8 || { [ "$MOE_NGPU" -ge 4 ] && echo 4 || echo 2; })}
MOE_LEFT=$(moe_left)
# A kernel that failed its correctness tests is not timed (MOE_BENCH_FORCE=1 times it anyway).
if [ "$MOE_GPU_OK" = 0 ] && [ "${MOE_BENCH_FORCE:-0}" != 1 ]; then
  note moe_bench "skipped: GPU tests failed (MOE_BENCH_FORCE=1 to time anyway)"
elif [ -x "$MOE_XS" ] && [ "$MOE_LEFT" -gt 90 ]; then
  step moe_bench timeout $((MOE_LEFT - 20)) "$MOE_XS" bench moe --ep "$MOE_EP" --sweep "$([ "$MOE_EP" = 8 ] && echo eight || echo standard)" --warmup 1 --iters 5 \
    --budget-s $((MOE_LEFT - 60)) --params "$ROOT/xstage/data/h200_params.json" \
    --json "$OUT/moe.json" $(png_arg "$OUT/moe_speedup.png") ${MOE_BENCH_ARGS:-}
  [ -f "$OUT/moe.json" ] && cp "$OUT/moe.json" "$FINAL_OUT/moe.json"
  [ -f "$OUT/moe_speedup.png" ] && cp "$OUT/moe_speedup.png" "$FINAL_OUT/moe_speedup.png"
else
  note moe_bench "skipped ($MOE_LEFT s left, or no xstage binary)"
fi
if [ -f "$OUT/moe.json" ]; then
  echo "---- bench moe (EP $MOE_EP; us; TFLOP/s per GPU) ----"
  python3 - "$OUT/moe.json" <<'PY' | tee "$OUT/moe_table.txt"
import json, math, sys
d = json.load(open(sys.argv[1]))
rows = d["rows"]
print(f"{'T':>5} {'E':>4} {'k':>2} {'hid':>5} {'I':>5} {'rout':>7} | {'EW':>8} {'IL':>8} {'unfused':>8} | "
      f"{'IL/EW':>5} {'fus/unf':>7} {'TF':>6} {'GEMM TF':>7} ok")
for r in rows:
    print(f"{r['tokens_per_rank']:>5} {r['experts']:>4} {r['topk']:>2} {r['hidden']:>5} {r['intermediate']:>5} "
          f"{r['routing']:>7} | {r['expert_wave_us']:>8.1f} {r['interleaved_us']:>8.1f} {r['unfused_us']:>8.1f} | "
          f"{r['speedup']:>5.3f} {r['fused_over_unfused']:>7.2f} {r['tflops']:>6.1f} {r['gemm_tflops']:>7.1f} "
          f"{'yes' if r['correct'] else 'NO'}")
fu = [r["fused_over_unfused"] for r in rows]
big = [r["fused_over_unfused"] for r in rows if r["tokens_per_rank"] >= 2048]
eff = [r["tflops"] / r["gemm_tflops"] for r in rows if r["tokens_per_rank"] == 8192 and r["gemm_tflops"] > 0]
g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
print(f"{len(rows)}/{d.get('rows_planned', '?')} rows; IL/EW geomean {d['geomean_speedup']:.3f} max {d['max_speedup']:.3f}; "
      f"fused/unfused geomean {g(fu):.2f} (>=2048 tokens: {g(big):.2f}); "
      f"fused/cuBLAS-GEMM at 8192: {min(eff) if eff else float('nan'):.2f}-{max(eff) if eff else float('nan'):.2f}; "
      f"all correct: {d['all_correct']}")
PY
  note moe_result "$(tail -1 "$OUT/moe_table.txt" | cut -c1-150)"
fi
note moe_stage "$(( $(date +%s) - MOE_T0 )) s of $MOE_BUDGET"
