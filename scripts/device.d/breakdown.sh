# Stage `breakdown` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT, $FINAL_OUT): where a
# DiT step's time goes, per phase (`xstage dit --breakdown`), on the GPUs present.
#   RUN_NAME=breakdown ./run device breakdown        (after `ranks` it reuses that build)
# 1. own build (RANKS_BUILD_DIR, default build-ranks) of the CLI and the DiT GPU tests, which run;
# 2. `xstage dit --breakdown` for flux-like (4096 tokens, BREAKDOWN_FLUX_BLOCKS, default 0 = all 57),
#    wan-like (75,600 tokens, BREAKDOWN_WAN_BLOCKS, default 2) and dit-moe (4096 tokens, all 28
#    blocks), P = BREAKDOWN_P (default: the most of 4, 2, 1 that fits; P > 1 adds the serial and fused
#    paths) -> dit_breakdown.json, and each run's chart dit_phases_PRESET.png (in the archive).
RB=${RANKS_BUILD_DIR:-$ROOT/build-ranks}
step breakdown_configure timeout 90 cmake -S "$ROOT" -B "$RB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_CUDA=ON \
  -DXSTAGE_BUILD_GAIT=OFF
step breakdown_build timeout 360 cmake --build "$RB" -j "$(nproc)" --target xstage xstage_dit_gpu_tests
step breakdown_dit_gpu_tests timeout 200 env XSTAGE_SOURCE_DIR="$ROOT" "$RB/xstage/tests/xstage_dit_gpu_tests"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|breakdown:" "$OUT/breakdown_dit_gpu_tests.log" 2>/dev/null | head -12
BP=${BREAKDOWN_P:-$([ "${NGPU:-1}" -ge 4 ] && echo 4 || { [ "${NGPU:-1}" -ge 2 ] && echo 2 || echo 1; })}
rm -f "$OUT/dit_breakdown.json"
for spec in "flux-like 4096 ${BREAKDOWN_FLUX_BLOCKS:-0} 5" "wan-like 75600 ${BREAKDOWN_WAN_BLOCKS:-2} 3" \
  "dit-moe 4096 0 5"; do
  set -- $spec
  step "breakdown_$1" timeout 200 env XSTAGE_SOURCE_DIR="$ROOT" "$RB/xstage/cli/xstage" dit --quiet --breakdown \
    --json "$OUT/dit_breakdown.json" --preset "$1" --tokens "$2" --blocks "$3" --steps 1 --warmup 1 --samples "$4" \
    --gpus "$BP" --png "$OUT/dit_phases_$1.png"
  sed -n '/^where a step/,/^sum/p' "$OUT/breakdown_$1.log"
done
[ -f "$OUT/dit_breakdown.json" ] && cp "$OUT/dit_breakdown.json" "$FINAL_OUT/"
