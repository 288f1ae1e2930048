# Stage `route` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT, $FINAL_OUT):
# the fused MoE with routing, layout and tile order on the GPU (FusedMoe::route_on_device)
# and its effect on the DiT MoE FFN, on this machine's first GPU(s).
#   RUN_NAME=route ./run device route
# 1. own build (build-route): the xstage CLI, the MoE and DiT tests;
# 2. CPU tests; GPU tests: the MoE kernel's (every fused case, the routing kernels against
#    the host layout and schedulers for P = 1..8, device- vs host-routed forwards) and
#    the DiT's (single GPU vs the CPU reference, GPU vs host routing);
# 3. `xstage dit --preset dit-moe` at P = 1 with ROUTE_BLOCKS blocks (default 28, the
#    whole preset), --moe-routing device and host in turns (d h d h), rows into
#    $OUT/dit_routing.json; then a short table.
ROUTE_T0=$(date +%s)
RB=${ROUTE_BUILD_DIR:-$ROOT/build-route}
RT="$RB/xstage/tests"
RX="$RB/xstage/cli/xstage"
step route_configure timeout 90 cmake -S "$ROOT" -B "$RB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_CUDA=ON \
  -DXSTAGE_BUILD_GAIT=OFF
step route_build timeout 300 cmake --build "$RB" -j "$(nproc)" --target xstage xstage_moe_tests xstage_moe_gpu_tests \
  xstage_dit_tests xstage_dit_gpu_tests
step route_cpu_tests timeout 60 sh -c "'$RT/xstage_moe_tests' && '$RT/xstage_dit_tests'"
step route_moe_gpu_tests timeout 240 "$RT/xstage_moe_gpu_tests"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|skipped" "$OUT/route_moe_gpu_tests.log" 2>/dev/null | head -20
step route_dit_gpu_tests timeout 200 env XSTAGE_SOURCE_DIR="$ROOT" "$RT/xstage_dit_gpu_tests"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|routing:|velocity vs" "$OUT/route_dit_gpu_tests.log" 2>/dev/null | head -20
rm -f "$OUT/dit_routing.json"
for turn in device host device host; do
  step "route_dit_moe_$turn" timeout 120 env XSTAGE_SOURCE_DIR="$ROOT" "$RX" dit --quiet --json "$OUT/dit_routing.json" \
    --preset dit-moe --tokens 4096 --steps 2 --blocks "${ROUTE_BLOCKS:-28}" --gpus 1 --samples 7 --moe-routing "$turn"
  cat "$OUT/route_dit_moe_$turn.log" >>"$OUT/route_dit_moe.log"
done
if [ -f "$OUT/dit_routing.json" ]; then
  cp "$OUT/dit_routing.json" "$FINAL_OUT/dit_routing.json"
  echo "---- xstage dit --preset dit-moe, P = 1 (ms per Euler step) ----"
  python3 - "$OUT/dit_routing.json" <<'PY' | tee "$OUT/route_table.txt"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    print(f"{r['preset']:<8} {r['tokens']:>6} blocks {r['blocks']:>3} routing {r.get('moe_routing', '?'):<6} "
          f"single {r['single_step_ms']:.3f} ms")
PY
fi
note route_stage "$(( $(date +%s) - ROUTE_T0 )) s"
