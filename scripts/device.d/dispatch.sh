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
moe_build_and_test dispatch "$DB2"
moe_ab_bench dispatch "$DB2" --compare-dispatch "${DISPATCH_LIMIT:-330}" "${DISPATCH_SWEEP:-}" \
  "${DISPATCH_TOKENS:-128,512,2048,8192}" "${DISPATCH_EP:-}"
if [ -f "$OUT/dispatch_bench.log" ]; then
  echo "---- bench moe --compare-dispatch (us; serdsp = Interleaved with all of the dispatch first) ----"
  grep -E "^ +T |^ +[0-9]+ +[0-9]+ " "$OUT/dispatch_bench.log" | tail -12
  grep -E "geometric|dispatch overlapped|budget" "$OUT/dispatch_bench.log"
fi
