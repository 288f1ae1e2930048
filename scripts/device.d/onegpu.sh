# Stage `onegpu` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT): what one
# GPU can check and measure of the multi-GPU issues, for sessions that are lent one H200.
#   RUN_NAME=onegpu ./run device onegpu
# 1. own build (build-onegpu): the xstage CLI and the MoE, DiT and Ulysses tests;
# 2. the fused Ulysses kernel's own cost (`xstage bench ulysses --kernel-only`, no NCCL):
#    attention alone, attention in the fused order, and the remote-store kernel with
#    every target local, for rank 0's share at P = 2 and 4 (ONEGPU_MAX_SEQ, default 65536);
# 3. GPU tests that need one GPU: the fused MoE kernel and the unfused cuBLAS
#    grouped-GEMM baseline at EP = 1 against the host reference (the multi-rank cases
#    skip), the DiT forward with the GELU and the MoE FFN against the CPU reference,
#    the Ulysses tests (P >= 2 cases skip);
# 4. the SASS of the local-store and remote-store attention kernels (opcode counts side
#    by side; the full dumps in the archive);
# 5. `xstage bench qkv`: the fused QKV projection + pre-attention All-to-All kernel with
#    every owner local, against cuBLAS + qk_norm_rope, checked against that path.
# 6. with ONEGPU_MOE_TOKENS (e.g. 2048,8192): `xstage bench moe --sweep one` at those
#    token counts, EP = 1 (the kernel's GEMMs, dispatch and combine with no NVLink; both
#    schedules, the unfused path, and the interleaved order over m-major tiles,
#    ONEGPU_MOE_COMPARE_RASTER, default 1) -> moe_one.json.
# Knobs: ONEGPU_MAX_SEQ (0 skips step 2), ONEGPU_QKV_GROUPS (bench qkv --groups, default 0,1), ONEGPU_RANKS (default 2,4), ONEGPU_BUDGET_S (wall seconds of the
# whole stage, default 540: each step's limit is cut to what is left, so the archive is made).
ONEGPU_T0=$(date +%s)
onegpu_limit() { # wanted seconds -> min(wanted, what is left of the budget less 10 s), at least 1
  local left=$(( ${ONEGPU_BUDGET_S:-540} - ($(date +%s) - ONEGPU_T0) - 10 ))
  [ "$left" -lt 1 ] && left=1
  echo $(( $1 < left ? $1 : left ))
}
OB=${ONEGPU_BUILD_DIR:-$ROOT/build-onegpu}
OT="$OB/xstage/tests"
step onegpu_configure timeout $(onegpu_limit 120) cmake -S "$ROOT" -B "$OB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_CUDA=ON \
  -DXSTAGE_BUILD_GAIT=OFF
step onegpu_build timeout $(onegpu_limit 420) cmake --build "$OB" -j "$(nproc)" --target xstage xstage_moe_gpu_tests \
  xstage_dit_gpu_tests xstage_ulysses_gpu_tests
if [ "${ONEGPU_MAX_SEQ:-65536}" = 0 ]; then note onegpu_ulysses_kernel "skipped (ONEGPU_MAX_SEQ=0)"; else
step onegpu_ulysses_kernel timeout $(onegpu_limit 200) env XSTAGE_SOURCE_DIR="$ROOT" XSTAGE_PRINT_CONFIG=1 \
  "$OB/xstage/cli/xstage" bench ulysses --kernel-only --ranks "${ONEGPU_RANKS:-2,4}" \
  --max-seq "${ONEGPU_MAX_SEQ:-65536}" --samples 5 --json "$OUT/ulysses_kernel.json"
fi
[ -f "$OUT/ulysses_kernel.json" ] && cp "$OUT/ulysses_kernel.json" "$FINAL_OUT/"
step onegpu_qkv_kernel timeout $(onegpu_limit 150) env XSTAGE_SOURCE_DIR="$ROOT" XSTAGE_PRINT_CONFIG=1 \
  "$OB/xstage/cli/xstage" bench qkv --groups "${ONEGPU_QKV_GROUPS:-0,1}" --json "$OUT/qkv_kernel.json"
[ -f "$OUT/qkv_kernel.json" ] && cp "$OUT/qkv_kernel.json" "$FINAL_OUT/"
if [ -n "${ONEGPU_MOE_TOKENS:-}" ]; then
  ONEGPU_MOE_LIMIT=$(onegpu_limit 300)
  step onegpu_moe_one timeout "$ONEGPU_MOE_LIMIT" env XSTAGE_SOURCE_DIR="$ROOT" "$OB/xstage/cli/xstage" bench moe \
    --sweep one --tokens "$ONEGPU_MOE_TOKENS" --compare-raster "${ONEGPU_MOE_COMPARE_RASTER:-1}" --warmup 1 --iters 5 \
    --budget-s $((ONEGPU_MOE_LIMIT - 25)) --json "$OUT/moe_one.json" --png "$OUT/moe_one.png"
  [ -f "$OUT/moe_one.json" ] && cp "$OUT/moe_one.json" "$FINAL_OUT/"
fi
step onegpu_moe_gpu_tests timeout $(onegpu_limit 120) "$OT/xstage_moe_gpu_tests"
grep -E "^\[  (FAILED|PASSED|SKIPPED|  OK) |Failure|unfused GEMMs|bad of" "$OUT/onegpu_moe_gpu_tests.log" 2>/dev/null | head -24
step onegpu_dit_gpu_tests timeout $(onegpu_limit 150) env XSTAGE_SOURCE_DIR="$ROOT" "$OT/xstage_dit_gpu_tests"
grep -E "^\[  (FAILED|PASSED|SKIPPED|  OK) |Failure|velocity vs|timed out" "$OUT/onegpu_dit_gpu_tests.log" 2>/dev/null | head -16
step onegpu_ulysses_gpu_tests timeout $(onegpu_limit 120) env XSTAGE_SOURCE_DIR="$ROOT" "$OT/xstage_ulysses_gpu_tests"
grep -E "^\[  (FAILED|PASSED|SKIPPED) " "$OUT/onegpu_ulysses_gpu_tests.log" 2>/dev/null | head -8
for lib in "$OB/xstage/ulysses/libxs_ulysses.a" "$OB/xstage/attention/libxs_attention.a" "$OB/xstage/moe/libxs_moe.a"; do
  cuobjdump --dump-resource-usage "$lib"  # one file per call: cuobjdump prints its usage for two
done >"$OUT/onegpu_resource_usage.log" 2>&1
cuobjdump --dump-sass "$OB/xstage/attention/libxs_attention.a" >"$OUT/onegpu_attention.sass" 2>&1
cuobjdump --dump-sass "$OB/xstage/ulysses/libxs_ulysses.a" >"$OUT/onegpu_fused.sass" 2>&1
python3 "$ROOT/scripts/sass_ops.py" "$OUT/onegpu_attention.sass" "$OUT/onegpu_fused.sass" --top 40 \
  >"$OUT/onegpu_sass_ops.log" 2>&1 || true
echo "---- bench qkv (ms; fused QKV + pre-A2A kernel, owners local, vs cuBLAS + qk_norm_rope; unsplit: no tail split) ----"
grep -E "^ +S |^ +[0-9]+ +[0-9] " "$OUT/onegpu_qkv_kernel.log" | head -16
if [ -f "$OUT/onegpu_moe_one.log" ]; then
  echo "---- bench moe --sweep one (EP = 1; us; IL g1 = interleaved over m-major tiles, gain = IL g1 / IL) ----"
  grep -E "^ +T |^ +[0-9]+ +[0-9]+ |geometric" "$OUT/onegpu_moe_one.log" | head -52
fi
if [ -f "$OUT/onegpu_ulysses_kernel.log" ]; then
  echo "---- bench ulysses --kernel-only (ms; ratios to attention alone) ----"
  grep -E "^ +S |^ +[0-9]+ +[0-9] " "$OUT/onegpu_ulysses_kernel.log" | cut -c1-120 | head -40
fi
note onegpu_sass "$(head -2 "$OUT/onegpu_sass_ops.log" | tr -s ' ' | tr '\n' ';' | cut -c1-150)"
