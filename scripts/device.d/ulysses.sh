# Stage `ulysses` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT).
# Own build (LibTorch SDPA baseline on when PyTorch is installed), the Ulysses
# CPU and GPU tests, then `xstage bench ulysses` over a bounded sweep (P that
# the visible GPUs allow). Every step has a time limit so the whole stage stays
# within ~8 minutes and the archive is always made. Knobs:
#   ULYSSES_MAX_SEQ (default 32768), ULYSSES_BENCH_TIMEOUT (s, default 170),
#   ULYSSES_RANKS (P values, default 2,4,8; those above the visible GPUs are skipped),
#   ULYSSES_BENCH_ARGS (extra bench arguments).
UB=${ULYSSES_BUILD_DIR:-$ROOT/build-ulysses}
U_TORCH=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
step ulysses_configure timeout 120 cmake -S "$ROOT" -B "$UB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_CUDA=ON \
  -DXSTAGE_BUILD_GAIT=OFF -DXSTAGE_TORCH_BASELINES=ON ${U_TORCH:+-DCMAKE_PREFIX_PATH="$U_TORCH"}
step ulysses_build timeout 300 cmake --build "$UB" -j "$(nproc)" --target xstage xstage_ulysses_tests \
  xstage_ulysses_gpu_tests
cuobjdump --dump-sass "$UB/xstage/ulysses/libxs_ulysses.a" 2>/dev/null | awk '/Function : /{f=($3 ~ /flash_fwd_kernel/) ? $3 : ""}
  f&&/HGMMA/{h[f]++} f&&/(LDL|STL)/{l[f]++} END{for(k in h) printf "HGMMA=%d LDL/STL=%d %s\n", h[k], l[k]+0, substr(k,1,60)}' \
  >"$OUT/ulysses_sass_check.log"
note ulysses_sass "$(awk '{printf "%s %s; ", $1, $2}' "$OUT/ulysses_sass_check.log")"
# Local-store (attention alone) vs remote-store (fused) kernels: same mainloop source,
# so differing opcode counts are code generation (docs/xstage-ulysses.md, D = 128 gap).
cuobjdump --dump-sass "$UB/xstage/attention/libxs_attention.a" >"$OUT/ulysses_attention.sass" 2>&1
cuobjdump --dump-sass "$UB/xstage/ulysses/libxs_ulysses.a" >"$OUT/ulysses_fused.sass" 2>&1
python3 "$ROOT/scripts/sass_ops.py" "$OUT/ulysses_attention.sass" "$OUT/ulysses_fused.sass" --top 30 \
  >"$OUT/ulysses_sass_ops.log" 2>&1 || true
head -5 "$OUT/ulysses_sass_ops.log"
step ulysses_cpu_tests timeout 60 "$UB/xstage/tests/xstage_ulysses_tests"
step ulysses_gpu_tests timeout 120 env XSTAGE_SOURCE_DIR="$ROOT" "$UB/xstage/tests/xstage_ulysses_gpu_tests"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|!= serial|timeout|Expected" "$OUT/ulysses_gpu_tests.log" | head -20
step ulysses_bench timeout "${ULYSSES_BENCH_TIMEOUT:-170}" env XSTAGE_SOURCE_DIR="$ROOT" XSTAGE_PRINT_CONFIG=1 \
  "$UB/xstage/cli/xstage" bench ulysses --ranks "${ULYSSES_RANKS:-2,4,8}" --max-seq "${ULYSSES_MAX_SEQ:-32768}" --samples 5 \
  --json "$OUT/ulysses.json" $(png_arg "$OUT/ulysses_speedup.png") ${ULYSSES_BENCH_ARGS:-}
[ -f "$OUT/ulysses.json" ] && cp "$OUT/ulysses.json" "$OUT/ulysses_speedup.png" "$FINAL_OUT/" 2>/dev/null
echo "---- bench ulysses (ms; speedup = serial / fused sender-visible) ----"
grep -E "^ +S |^ +[0-9]+ +[0-9] |maximum|note:" "$OUT/ulysses_bench.log" | head -40
note ulysses_result "$(grep -E '^maximum' "$OUT/ulysses_bench.log" 2>/dev/null | head -1 | cut -c1-110)"
