# Stage `onegpu` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT): what one GPU
# can check and measure of the multi-GPU work, for sessions lent one H200, within
# ONEGPU_BUDGET_S seconds (default 540): each step's limit is cut to what is left, and a
# step with under 20 s left is skipped with a note, so the archive is always made.
#   RUN_NAME=onegpu ./run device onegpu
# 1. own build (build-onegpu): the xstage CLI and the MoE, DiT and Ulysses GPU tests;
# 2. the GPU tests at one GPU (the multi-rank cases skip): the fused MoE kernel and the
#    unfused cuBLAS baseline at EP = 1, the DiT forward (GELU MLP and MoE FFN) against the
#    CPU reference, the Ulysses kernels;
# 3. among them the one-GPU stand-ins for P ranks (tests *OnOneGpu*; ONEGPU_STANDINS=0 leaves
#    them out): moe::OneGpuGroup (EP = 2, 4, 8, the P kernels at once) and the Ulysses
#    kernels with every owner's buffers local (P = 2, 4, 8);
# 4. the SASS of the local-store and remote-store attention kernels, side by side;
# 5. ONEGPU_BENCH (default 1; 0 skips 5 and the CLI's build): `xstage bench ulysses
#    --kernel-only` (no NCCL; ONEGPU_RANKS, default 2,4; ONEGPU_MAX_SEQ, default 65536, 0 skips)
#    and `xstage bench qkv` (ONEGPU_QKV_GROUPS, default 0,1): the fused kernels' own cost with
#    every target local -> ulysses_kernel.json, qkv_kernel.json;
# 6. ONEGPU_SANITIZE (default "memcheck racecheck synccheck"; "none" skips): compute-sanitizer
#    on the one-GPU tests of the MoE kernel, the fused QKV and attention-epilogue kernels and
#    the DiT's own kernels (not the stand-ins: their kernels wait for each other, and the
#    sanitizer runs one at a time). Each run within ONEGPU_SAN_LIMIT s (default 150), each
#    wait's budget raised to ONEGPU_SAN_WAIT_MS (default 60000). API errors are not reported
#    (NCCL's own probes fail under the sanitizer by design).
# Every result file stays in this run's archive ($OUT); none is copied out.
ONEGPU_T0=$(date +%s)
ONEGPU_BUDGET=${ONEGPU_BUDGET_S:-540}
og_step() { step_within "$ONEGPU_T0" "$ONEGPU_BUDGET" "$@"; }  # name, wanted seconds, command...
OB=${ONEGPU_BUILD_DIR:-$ROOT/build-onegpu}
OT="$OB/xstage/tests"
OX="$OB/xstage/cli/xstage"
tests_of() { grep -hE "^\[  (FAILED|PASSED|SKIPPED) |Failure|bad of|differ|unfused GEMMs|velocity vs|timed out" "$@" 2>/dev/null | head -24; }

og_step onegpu_configure 120 cmake -S "$ROOT" -B "$OB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_CUDA=ON \
  -DXSTAGE_BUILD_GAIT=OFF
ONEGPU_BENCH=${ONEGPU_BENCH:-1}
og_step onegpu_build 420 cmake --build "$OB" -j "$(nproc)" --target $([ "$ONEGPU_BENCH" = 0 ] || echo xstage) \
  xstage_moe_gpu_tests xstage_dit_gpu_tests xstage_ulysses_gpu_tests

NO_STANDINS=$([ "${ONEGPU_STANDINS:-1}" = 0 ] && echo "--gtest_filter=-*OnOneGpu*")
og_step onegpu_moe_gpu_tests 300 "$OT/xstage_moe_gpu_tests" $NO_STANDINS
og_step onegpu_dit_gpu_tests 150 env XSTAGE_SOURCE_DIR="$ROOT" "$OT/xstage_dit_gpu_tests"
og_step onegpu_ulysses_gpu_tests 240 env XSTAGE_SOURCE_DIR="$ROOT" "$OT/xstage_ulysses_gpu_tests" $NO_STANDINS
tests_of "$OUT"/onegpu_{moe,dit,ulysses}_gpu_tests.log

for lib in ulysses/libxs_ulysses.a attention/libxs_attention.a moe/libxs_moe.a; do
  cuobjdump --dump-resource-usage "$OB/xstage/$lib"  # one file per call: cuobjdump prints its usage for two
done >"$OUT/onegpu_resource_usage.log" 2>&1
cuobjdump --dump-sass "$OB/xstage/attention/libxs_attention.a" >"$OUT/onegpu_attention.sass" 2>&1
cuobjdump --dump-sass "$OB/xstage/ulysses/libxs_ulysses.a" >"$OUT/onegpu_fused.sass" 2>&1
python3 "$ROOT/scripts/sass_ops.py" "$OUT/onegpu_attention.sass" "$OUT/onegpu_fused.sass" --top 40 \
  >"$OUT/onegpu_sass_ops.log" 2>&1 || true
note onegpu_sass "$(head -2 "$OUT/onegpu_sass_ops.log" | tr -s ' ' | tr '\n' ';' | cut -c1-150)"

if [ "$ONEGPU_BENCH" = 0 ]; then note onegpu_bench "skipped (ONEGPU_BENCH=0)"
elif [ "${ONEGPU_MAX_SEQ:-65536}" = 0 ]; then note onegpu_ulysses_kernel "skipped (ONEGPU_MAX_SEQ=0)"; else
  og_step onegpu_ulysses_kernel 200 env XSTAGE_SOURCE_DIR="$ROOT" XSTAGE_PRINT_CONFIG=1 "$OX" bench ulysses \
    --kernel-only --ranks "${ONEGPU_RANKS:-2,4}" --max-seq "${ONEGPU_MAX_SEQ:-65536}" --samples 5 \
    --json "$OUT/ulysses_kernel.json"
fi
if [ "$ONEGPU_BENCH" != 0 ]; then
  og_step onegpu_qkv_kernel 150 env XSTAGE_SOURCE_DIR="$ROOT" XSTAGE_PRINT_CONFIG=1 "$OX" bench qkv \
    --groups "${ONEGPU_QKV_GROUPS:-0,1}" --json "$OUT/qkv_kernel.json"
fi

SAN_MOE='MoeFusedGpu.SingleRank:MoeRouteGpu.*'
SAN_ULY='UlyssesQkvGpu.OneRankKernelMatchesTheReference:UlyssesQkvGpu.EveryOwnerGetsItsHeadsOnOneGpu:UlyssesGpu.FusedEpilogueDeliversEveryOwnersRowsOnOneGpu'
SAN_DIT='DitGpu.SingleGpuForwardMatchesCpuReference:DitGpu.MoeSingleGpuForwardMatchesCpuReference:DitGpu.GatedResidualLnModulateMatchesHostReference:DitGpu.BiasGeluEpilogueMatchesHostReference'
SAN_TOOLS=${ONEGPU_SANITIZE:-memcheck racecheck synccheck}
[ "$SAN_TOOLS" = none ] && SAN_TOOLS=""
for tool in $SAN_TOOLS; do
  for t in moe ulysses dit; do
    # racecheck and synccheck look at shared memory and barriers: the fused kernels only.
    case $tool/$t in
      memcheck/moe) f=$SAN_MOE ;; memcheck/ulysses) f=$SAN_ULY ;; memcheck/dit) f=$SAN_DIT ;;
      */moe) f='MoeFusedGpu.SingleRank' ;; */ulysses) f='UlyssesQkvGpu.OneRankKernelMatchesTheReference' ;;
      *) continue ;;
    esac
    og_step "san_${tool}_$t" "${ONEGPU_SAN_LIMIT:-150}" env XSTAGE_WAIT_TIMEOUT_MS="${ONEGPU_SAN_WAIT_MS:-60000}" \
      XSTAGE_SOURCE_DIR="$ROOT" compute-sanitizer --tool "$tool" --report-api-errors no --error-exitcode 9 \
      "$OT/xstage_${t}_gpu_tests" --gtest_filter="$f"
  done
done

if [ -f "$OUT/onegpu_qkv_kernel.log" ]; then
  echo "---- bench qkv (ms; fused QKV + pre-A2A kernel, owners local, vs cuBLAS + qk_norm_rope) ----"
  grep -E "^ +S |^ +[0-9]+ +[0-9] " "$OUT/onegpu_qkv_kernel.log" | head -16
fi
if [ -f "$OUT/onegpu_ulysses_kernel.log" ]; then
  echo "---- bench ulysses --kernel-only (ms; ratios to attention alone) ----"
  grep -E "^ +S |^ +[0-9]+ +[0-9] " "$OUT/onegpu_ulysses_kernel.log" | cut -c1-120 | head -40
fi
if ls "$OUT"/san_*.log >/dev/null 2>&1; then
  echo "---- compute-sanitizer summaries ----"
  for f in "$OUT"/san_*.log; do
    printf '%-28s %s | %s\n' "$(basename "$f" .log)" "$(grep -hE "(ERROR|RACECHECK|SYNCCHECK) SUMMARY" "$f" | tail -1)" \
      "$(grep -hE "^\[  (PASSED|FAILED) " "$f" | tr '\n' ' ')"
  done
fi
note onegpu_stage "$(( $(date +%s) - ONEGPU_T0 )) s of $ONEGPU_BUDGET"
