# Stage `release` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT, $FINAL_OUT): the fused
# MoE kernel's tile releases by the release agent (FusedMoe::ReleaseMode::by_agent) against the
# consumers' own (by_consumer), on this machine's GPUs.
#   RUN_NAME=release ./run device release
# 1. own build (build-release): the xstage CLI, the MoE tests and the DiT GPU tests;
# 2. CPU tests, then the MoE GPU tests (every dispatch x release mode, bitwise) and the DiT GPU tests;
# 3. ptxas figures of the MoE kernel (registers, stack, spills);
# 4. `xstage bench moe --compare-release` (RELEASE_SWEEP, default "one" on one GPU, "standard"
#    otherwise; RELEASE_TOKENS, default 128,512,2048,8192; RELEASE_EP as DISPATCH_EP of the
#    dispatch stage; within RELEASE_LIMIT seconds, default 300) -> moe_release.json and its PNG;
# 5. dit-moe at P = 1, 28 blocks (one run), into dit_moe_one.json;
# 6. a short table: the bench's summary lines.
RB=${RELEASE_BUILD_DIR:-$ROOT/build-release}
moe_build_and_test release "$RB" -DCMAKE_CUDA_FLAGS="-Xptxas -v"
grep -A2 "moe_fused_kernel" "$OUT/release_build.log" | grep -E "registers|stack" | head -4
moe_ab_bench release "$RB" --compare-release "${RELEASE_LIMIT:-300}" "${RELEASE_SWEEP:-}" \
  "${RELEASE_TOKENS:-128,512,2048,8192}" "${RELEASE_EP:-}"
rm -f "$OUT/dit_moe_one.json"
step release_dit_moe timeout 120 env XSTAGE_SOURCE_DIR="$ROOT" "$RB/xstage/cli/xstage" dit --quiet \
  --json "$OUT/dit_moe_one.json" --preset dit-moe --tokens 4096 --steps 2 --blocks 28 --gpus 1 --samples 7
grep -h "MoE FFN on the GPU\|^dit-moe" "$OUT/release_dit_moe.log"
[ -f "$OUT/dit_moe_one.json" ] && cp "$OUT/dit_moe_one.json" "$FINAL_OUT/"
if [ -f "$OUT/release_bench.log" ]; then
  echo "---- bench moe --compare-release (us; IL cons. = Interleaved released by the consumers) ----"
  grep -E "^ +T |^ +[0-9]+ +[0-9]+ " "$OUT/release_bench.log" | tail -10
  grep -E "geometric|release by the agent|budget" "$OUT/release_bench.log"
fi
