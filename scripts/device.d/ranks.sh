# Stage `ranks` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT): the fused kernels'
# P > 1 code on one GPU, then compute-sanitizer on their one-GPU tests.
#   RUN_NAME=ranks ./run device ranks
# 1. own build (RANKS_BUILD_DIR, default build-ranks) of the MoE, Ulysses and DiT GPU tests;
# 2. the one-GPU stand-ins for P ranks: moe::OneGpuGroup (EP = 2, 4, 8, the P kernels at once)
#    and the Ulysses kernels with every owner's buffers local (P = 2, 4, 8);
# 3. compute-sanitizer (RANKS_SANITIZE, default "memcheck racecheck synccheck"; "none" skips) on the MoE
#    kernel at EP = 1, the fused QKV kernel, the fused attention epilogue and the DiT's own
#    kernels. Not the OneGpuGroup tests: the sanitizer runs one kernel at a time, and those
#    kernels wait for each other (they would time out). Each wait's budget is raised to
#    RANKS_SAN_WAIT_MS (default 60000): instrumented spins run slower. API errors are not
#    reported (NCCL's own probes under the sanitizer fail cuMemCreate and cudaFuncGetAttributes
#    by design; every call of ours is checked where it is made).
RB=${RANKS_BUILD_DIR:-$ROOT/build-ranks}
step ranks_configure timeout 90 cmake -S "$ROOT" -B "$RB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_CUDA=ON \
  -DXSTAGE_BUILD_GAIT=OFF
step ranks_build timeout 360 cmake --build "$RB" -j "$(nproc)" --target xstage_moe_gpu_tests \
  xstage_ulysses_gpu_tests xstage_dit_gpu_tests
RT="$RB/xstage/tests"
step ranks_moe timeout 180 "$RT/xstage_moe_gpu_tests" --gtest_filter='MoeFusedGpu.*OnOneGpu*'
step ranks_ulysses timeout 180 "$RT/xstage_ulysses_gpu_tests" --gtest_filter='*OnOneGpu'
grep -hE "^\[  (FAILED|PASSED|SKIPPED) |Failure|differ|bad of" "$OUT/ranks_moe.log" "$OUT/ranks_ulysses.log" \
  2>/dev/null | head -20
SAN_MOE='MoeFusedGpu.SingleRank:MoeRouteGpu.*'
SAN_ULY='UlyssesQkvGpu.OneRankKernelMatchesTheReference:UlyssesQkvGpu.EveryOwnerGetsItsHeadsOnOneGpu:UlyssesGpu.FusedEpilogueDeliversEveryOwnersRowsOnOneGpu'
SAN_DIT='DitGpu.SingleGpuForwardMatchesCpuReference:DitGpu.MoeSingleGpuForwardMatchesCpuReference:DitGpu.GatedResidualLnModulateMatchesHostReference:DitGpu.BiasGeluEpilogueMatchesHostReference'
SAN_TOOLS=${RANKS_SANITIZE:-memcheck racecheck synccheck}
[ "$SAN_TOOLS" = none ] && SAN_TOOLS=""
for tool in $SAN_TOOLS; do
  for t in moe ulysses dit; do
    # racecheck and synccheck look at shared memory and barriers: the fused kernels only.
    case $tool/$t in
      memcheck/moe) f=$SAN_MOE ;; memcheck/ulysses) f=$SAN_ULY ;; memcheck/dit) f=$SAN_DIT ;;
      */moe) f='MoeFusedGpu.SingleRank' ;; */ulysses) f='UlyssesQkvGpu.OneRankKernelMatchesTheReference' ;;
      *) continue ;;
    esac
    step "san_${tool}_$t" timeout "${RANKS_SAN_LIMIT:-150}" env XSTAGE_WAIT_TIMEOUT_MS="${RANKS_SAN_WAIT_MS:-60000}" \
      XSTAGE_SOURCE_DIR="$ROOT" compute-sanitizer --tool "$tool" --report-api-errors no --error-exitcode 9 "$RT/xstage_${t}_gpu_tests" \
      --gtest_filter="$f"
  done
done
echo "---- compute-sanitizer summaries ----"
for f in "$OUT"/san_*.log; do
  [ -f "$f" ] || continue
  printf '%-28s %s | %s\n' "$(basename "$f" .log)" "$(grep -hE "(ERROR|RACECHECK|SYNCCHECK) SUMMARY" "$f" | tail -1)" \
    "$(grep -hE "^\[  (PASSED|FAILED) " "$f" | tr '\n' ' ')"
done
