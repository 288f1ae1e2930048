# Stage `epilogue` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT, $FINAL_OUT):
# the GEMM tails of Config::gemm_epilogues at P = 1 against the separate kernels: the GELU
# MLP's fc1 + bias + GELU as one cuBLASLt GEMM (dit::BiasGemm) against the cuBLAS GEMM +
# bias_act; (session 13) the projection's and fc2's bias in cuBLASLt epilogues with bf16
# branches into the gated residual, against fp32 GEMM outputs; and the QKV projection as the
# fused QKV kernel with every head local against the cuBLAS GEMM + qk_norm_rope.
#   RUN_NAME=epilogue ./run device epilogue
# 1. own build (build-epilogue) and the MoE and DiT tests (moe_build_and_test);
# 2. of the DiT GPU tests' output, BiasGeluEpilogueMatchesHostReference's and
#    GatedResidualLnModulateMatchesHostReference's margins and the velocity against the CPU
#    reference with both forms;
# 3. `xstage dit --gpus 1 --breakdown` with --gemm-epilogues fused and separate in turns
#    (f s f s): flux-like 4096 tokens, 4 blocks; wan-like 75,600, 2 blocks (since session 14
#    the fused form pads them to 75,648, whole 128-row tiles, and runs the fused QKV kernel;
#    the separate form does not pad); flux-like 4096, all 57 blocks;
#    dit-moe 4096, 28 blocks (no fc1: the QKV projection only); rows into
#    $OUT/dit_epilogue.json, in run order;
# 4. a short table (step time, and the qkv and ffn phases of the breakdown).
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
      --gpus 1 --samples 7 --breakdown --gemm-epilogues "$turn" ${EPI_EXTRA:-}
  done
}
run_turns flux-like 4096 4 90 fused separate fused separate
run_turns wan-like 75600 2 150 fused separate fused separate
run_turns flux-like 4096 0 150 fused separate fused separate
run_turns dit-moe 4096 28 150 fused separate fused separate
python3 "$ROOT/scripts/merge_run_rows.py" "$OUT/dit_epilogue.json" \
  "RUN_NAME=${RUN_NAME:-epilogue} ./run device epilogue (scripts/device.d/epilogue.sh): xstage dit --gpus 1 runs in turns, rows in run order" \
  "$OUT"/dit_epi_*.json
[ -f "$OUT/dit_epilogue.json" ] && python3 - "$OUT/dit_epilogue.json" <<'PY' | tee "$OUT/epilogue_table.txt"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
print("---- xstage dit, P = 1 (ms per Euler step, median of 7), in run order ----")
print(f"{'preset':>10} {'tokens':>6} {'blocks':>6} {'tails':>9} {'qkv':>22} {'step ms':>9} {'qkv ms':>8} {'ffn ms':>8}")
for r in rows:
    ph = r.get("phases_ms_per_step", {}).get("single", {})
    print(f"{r['preset']:>10} {r['tokens']:>6} {r['blocks']:>6} {r.get('gemm_epilogues', '-'):>9} "
          f"{r.get('single_qkv_projection', '-'):>22} {r['single_step_ms']:>9.3f} {ph.get('qkv', 0):>8.3f} "
          f"{ph.get('ffn', 0):>8.3f}")
PY
[ -f "$OUT/dit_epilogue.json" ] && cp "$OUT/dit_epilogue.json" "$FINAL_OUT/dit_epilogue.json"
