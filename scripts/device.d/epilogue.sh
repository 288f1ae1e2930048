# Stage `epilogue` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT, $FINAL_OUT):
# the GELU MLP's fc1 + bias + GELU as one cuBLASLt GEMM (dit::BiasGeluGemm,
# Config::gemm_epilogues) against the cuBLAS GEMM + bias_act, and FusedMoe::set_inputs'
# stream-ordered copies.
#   RUN_NAME=epilogue ./run device epilogue
# 1. own build (build-epilogue) and the MoE and DiT tests (moe_build_and_test);
# 2. of the DiT GPU tests' output, BiasGeluEpilogueMatchesHostReference's and
#    GatedResidualLnModulateMatchesHostReference's margins and the velocity against the CPU
#    reference with both forms;
# 3. `xstage dit --gpus 1` with --gemm-epilogues fused and separate in turns (f s f s):
#    flux-like 4096 tokens, 4 blocks; wan-like 75,600, 2 blocks (f s); flux-like 4096, all
#    57 blocks (f s f s); then dit-moe 4096, 28 blocks (the MoE presets have no fc1), with
#    routing on the GPU and with host routing (the set_inputs upload); rows into
#    $OUT/dit_epilogue.json, in run order;
# 4. a short table.
EB=${EPI_BUILD_DIR:-$ROOT/build-epilogue}
EX="$EB/xstage/cli/xstage"
moe_build_and_test epi "$EB"  # scripts/device.sh: configure, build, the MoE and DiT tests
grep -E "tolerance|fc1 tail" "$OUT/epi_dit_gpu_tests.log" 2>/dev/null | head -20
rm -f "$OUT"/dit_epi_*.json "$OUT/dit_epilogue.json"
i=0
run_turns() { # preset tokens blocks timeout turns... (extra xstage dit args in EPI_EXTRA)
  local preset=$1 tokens=$2 blocks=$3 limit=$4; shift 4
  for turn in "$@"; do
    i=$((i + 1))
    step "epi_${i}_${preset}_$turn" timeout "$limit" env XSTAGE_SOURCE_DIR="$ROOT" "$EX" dit --quiet \
      --json "$OUT/dit_epi_$(printf %02d $i).json" --preset "$preset" --tokens "$tokens" --steps 1 --blocks "$blocks" \
      --gpus 1 --samples 7 --gemm-epilogues "$turn" ${EPI_EXTRA:-}
  done
}
run_turns flux-like 4096 4 90 fused separate fused separate
run_turns wan-like 75600 2 150 fused separate
run_turns flux-like 4096 0 150 fused separate fused separate
run_turns dit-moe 4096 28 150 fused
EPI_EXTRA="--moe-routing host" run_turns dit-moe 4096 28 150 fused
python3 "$ROOT/scripts/merge_run_rows.py" "$OUT/dit_epilogue.json" \
  "RUN_NAME=${RUN_NAME:-epilogue} ./run device epilogue (scripts/device.d/epilogue.sh): xstage dit --gpus 1 runs in turns, rows in run order" \
  "$OUT"/dit_epi_*.json
[ -f "$OUT/dit_epilogue.json" ] && python3 - "$OUT/dit_epilogue.json" <<'PY' | tee "$OUT/epilogue_table.txt"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
print("---- xstage dit, P = 1 (ms per Euler step, median of 7), in run order ----")
print(f"{'preset':>10} {'tokens':>6} {'blocks':>6} {'tails':>9} {'step ms':>9} {'upload us':>9}")
for r in rows:
    up = r.get("moe_host_us_per_block", {}).get("single", {}).get("upload_launch")
    print(f"{r['preset']:>10} {r['tokens']:>6} {r['blocks']:>6} {r.get('gemm_epilogues', '-'):>9} "
          f"{r['single_step_ms']:>9.3f} {'' if up is None else f'{up:.1f}':>9}")
PY
[ -f "$OUT/dit_epilogue.json" ] && cp "$OUT/dit_epilogue.json" "$FINAL_OUT/dit_epilogue.json"
