# Stage `pad` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT, $FINAL_OUT):
# padded sequences (dit::padded_tokens, ulysses::Problem::valid) on this machine's GPU(s).
#   RUN_NAME=pad ./run device pad
# 1. own build (build-pad): the xstage CLI, the Ulysses, MoE and DiT tests;
# 2. CPU tests; GPU tests: Ulysses (PaddedRowsAreNotKeys and the rest), MoE (PAD_MOE_TESTS=0
#    skips), DiT (PaddingChangesNoRealToken and the rest);
# 3. the cost of padding, P = 1: `xstage dit --preset wan-like --tokens 75600` unpadded and
#    with --pad-multiple 512 (75,776 tokens, the shape each of P = 2, 4 and 8 ranks pads to),
#    in turns (u p u p), PAD_WAN_BLOCKS blocks (default 2); rows into $OUT/dit_pad.json;
# 4. a short table.
PB=${PAD_BUILD_DIR:-$ROOT/build-pad}
PT="$PB/xstage/tests"
PX="$PB/xstage/cli/xstage"
step pad_configure timeout 90 cmake -S "$ROOT" -B "$PB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_CUDA=ON \
  -DXSTAGE_BUILD_GAIT=OFF
step pad_build timeout 330 cmake --build "$PB" -j "$(nproc)" --target xstage xstage_ulysses_tests \
  xstage_ulysses_gpu_tests xstage_moe_gpu_tests xstage_dit_tests xstage_dit_gpu_tests
step pad_cpu_tests timeout 60 sh -c "'$PT/xstage_ulysses_tests' && '$PT/xstage_dit_tests'"
step pad_ulysses_gpu_tests timeout 150 "$PT/xstage_ulysses_gpu_tests"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure" "$OUT/pad_ulysses_gpu_tests.log" 2>/dev/null | head -20
if [ "${PAD_MOE_TESTS:-1}" = 1 ]; then
  step pad_moe_gpu_tests timeout 240 "$PT/xstage_moe_gpu_tests"
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure" "$OUT/pad_moe_gpu_tests.log" 2>/dev/null | head -20
fi
step pad_dit_gpu_tests timeout 200 env XSTAGE_SOURCE_DIR="$ROOT" "$PT/xstage_dit_gpu_tests"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|unpadded" "$OUT/pad_dit_gpu_tests.log" 2>/dev/null | head -24
rm -f "$OUT/dit_pad.json"
i=0
for turn in ${PAD_TURNS:-0 512 0 512}; do
  i=$((i + 1))
  step "pad_wan_${i}_$turn" timeout 150 env XSTAGE_SOURCE_DIR="$ROOT" "$PX" dit --quiet --json "$OUT/dit_pad_$i.json" \
    --preset wan-like --tokens 75600 --steps 1 --blocks "${PAD_WAN_BLOCKS:-2}" --gpus 1 --samples 5 \
    --pad-multiple "$turn"
done
python3 "$ROOT/scripts/merge_run_rows.py" "$OUT/dit_pad.json" \
  "RUN_NAME=pad ./run device pad (scripts/device.d/pad.sh): xstage dit runs in turns, rows in run order" \
  "$OUT"/dit_pad_*.json
[ -f "$OUT/dit_pad.json" ] && python3 - "$OUT/dit_pad.json" <<'PY' | tee "$OUT/pad_table.txt"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
print("---- xstage dit --preset wan-like --tokens 75600, P = 1 (ms per Euler step), in run order ----")
print(f"{'tokens':>7} {'padded':>7} {'blocks':>6} {'step ms':>9}")
for r in rows:
    print(f"{r['tokens']:>7} {r.get('padded_tokens', r['tokens']):>7} {r['blocks']:>6} {r['single_step_ms']:>9.2f}")
PY
[ -f "$OUT/dit_pad.json" ] && cp "$OUT/dit_pad.json" "$FINAL_OUT/dit_pad.json"
