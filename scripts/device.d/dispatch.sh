# Stage `dispatch` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT, $FINAL_OUT):
# the fused MoE kernel's dispatch overlapped with its tiles (moe::DispatchPlan) against
# all of the dispatch before the tiles, on this machine's GPUs.
#   RUN_NAME=dispatch ./run device dispatch
# 1. own build (build-dispatch): the xstage CLI, the MoE tests and the DiT GPU tests;
# 2. CPU tests, then the MoE and DiT GPU tests (every case the visible GPUs allow);
# 3. `xstage bench moe --compare-dispatch` (DISPATCH_SWEEP, default "one" on one GPU,
#    "standard" otherwise; DISPATCH_TOKENS, default 128,512,2048,8192; DISPATCH_EP, default
#    4 or 2 on a multi-GPU machine (the most that fits); within
#    DISPATCH_LIMIT seconds, default 330) -> moe_dispatch.json and its PNG;
# 4. a short table: the bench's summary lines.
DB2=${DISPATCH_BUILD_DIR:-$ROOT/build-dispatch}
DT2="$DB2/xstage/tests"
step dispatch_configure timeout 90 cmake -S "$ROOT" -B "$DB2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_CUDA=ON \
  -DXSTAGE_BUILD_GAIT=OFF
step dispatch_build timeout 330 cmake --build "$DB2" -j "$(nproc)" --target xstage xstage_moe_tests xstage_moe_gpu_tests \
  xstage_dit_gpu_tests
step dispatch_cpu_tests timeout 60 "$DT2/xstage_moe_tests"
step dispatch_moe_gpu_tests timeout 240 "$DT2/xstage_moe_gpu_tests"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure" "$OUT/dispatch_moe_gpu_tests.log" 2>/dev/null | head -20
step dispatch_dit_gpu_tests timeout 200 env XSTAGE_SOURCE_DIR="$ROOT" "$DT2/xstage_dit_gpu_tests"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure" "$OUT/dispatch_dit_gpu_tests.log" 2>/dev/null | head -12
DISPATCH_LIMIT=${DISPATCH_LIMIT:-330}
DSW=${DISPATCH_SWEEP:-$([ "${NGPU:-1}" -ge 2 ] && echo standard || echo one)}
# Multi-GPU: one EP, the most of 4 and 2 that fits (the standard sweep holds both).
[ -z "${DISPATCH_EP:-}" ] && [ "${NGPU:-1}" -ge 2 ] && DISPATCH_EP=$([ "${NGPU:-1}" -ge 4 ] && echo 4 || echo 2)
step dispatch_bench timeout "$DISPATCH_LIMIT" env XSTAGE_SOURCE_DIR="$ROOT" "$DB2/xstage/cli/xstage" bench moe \
  --sweep "$DSW" --tokens "${DISPATCH_TOKENS:-128,512,2048,8192}" ${DISPATCH_EP:+--ep "$DISPATCH_EP"} \
  --compare-dispatch --warmup 1 --iters 5 --budget-s $((DISPATCH_LIMIT - 25)) \
  --json "$OUT/moe_dispatch.json" --png "$OUT/moe_dispatch.png"
for f in moe_dispatch.json moe_dispatch.png; do [ -f "$OUT/$f" ] && cp "$OUT/$f" "$FINAL_OUT/"; done
if [ -f "$OUT/dispatch_bench.log" ]; then
  echo "---- bench moe --compare-dispatch (us; serdsp = Interleaved with all of the dispatch first) ----"
  grep -E "^ +T |^ +[0-9]+ +[0-9]+ " "$OUT/dispatch_bench.log" | tail -12
  grep -E "geometric|dispatch overlapped|budget" "$OUT/dispatch_bench.log"
fi
