# Stage `multi` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT, $FINAL_OUT, $NGPU):
# the first call on a machine with 2, 4 or 8 GPUs, within MULTI_BUDGET_S seconds (default
# 560, one 10-minute call): it checks all the multi-GPU code and then takes each issue's
# headline rows, most important first, before the full sweeps (the moe, ulysses and dit
# stages, one call each):
#   RUN_NAME=multi ./run device multi
# 1. one build (build-multi; LibTorch SDPA baseline on when PyTorch is installed) of
#    everything but gait;
# 2. every GPU test at this GPU count (ctest -L gpu; the 2- and 4-rank cases run now);
# 3. the DiT rows: `xstage dit` flux-like 4096 tokens (MULTI_DIT_BLOCKS blocks,
#    default 4) and wan-like 75,600 (2 blocks) at P = 4 (2 on two GPUs), with --breakdown,
#    into $OUT/dit.json (docs/results/dit.json's format); before them `xstage dit --plan` of
#    the same two runs (predicted stalls, bytes and FLOPs per rank) into $OUT/dit_plan_*;
# 4. `xstage bench ulysses` at P = 4 (2), S from 4K to MULTI_ULYSSES_MAX_SEQ
#    (default 32768), into $OUT/ulysses_multi.json and its PNG;
# 5. `xstage bench moe` at EP = 4 (2), tokens MULTI_MOE_TOKENS (default 2048), for
#    the time left, into $OUT/moe_multi.json and its PNG;
# 6. a short table of the rows.
# A step that no longer fits the budget is skipped with a note; tests that fail stop the
# benches of their subsystem (MULTI_FORCE=1 runs them anyway).
MULTI_T0=$(date +%s)
MULTI_BUDGET=${MULTI_BUDGET_S:-560}
multi_left() { echo $((MULTI_BUDGET - ($(date +%s) - MULTI_T0))); }
MUB=${MULTI_BUILD_DIR:-$ROOT/build-multi}
MUX="$MUB/xstage/cli/xstage"
MU_P=$([ "${NGPU:-1}" -ge 4 ] && echo 4 || { [ "${NGPU:-1}" -ge 2 ] && echo 2 || echo 1; })
# One GPU (a check of this script): the DiT rows at P = 1, the MoE rows at EP = 1, no Ulysses rows.
[ "$MU_P" = 1 ] && note multi "one GPU: the rows run at P = 1 and skip Ulysses (a check of the stage, not its figures)"
MU_MOE_SWEEP=$([ "$MU_P" = 1 ] && echo one || echo standard)
MU_TORCH=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
step multi_configure timeout 120 cmake -S "$ROOT" -B "$MUB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_CUDA=ON \
  -DXSTAGE_BUILD_GAIT=OFF -DXSTAGE_TORCH_BASELINES=ON ${MU_TORCH:+-DCMAKE_PREFIX_PATH="$MU_TORCH"}
step multi_build timeout 330 cmake --build "$MUB" -j "$(nproc)"
# Which subsystems' GPU tests passed (a failed one keeps its bench out).
MU_FAILED=""
if step multi_gpu_tests timeout $(( $(multi_left) > 280 ? 240 : $(multi_left) - 40 )) \
    ctest --test-dir "$MUB" -L gpu --output-on-failure -j 1; then :; else
  MU_FAILED=$(grep -oE "xstage_[a-z]+_gpu_tests" "$OUT/multi_gpu_tests.log" | sort -u | tr '\n' ' ')
  note multi_failed "${MU_FAILED:-see multi_gpu_tests.log}"
fi
grep -E "Test +#|tests passed|SKIPPED" "$OUT/multi_gpu_tests.log" | tail -20
mu_ok() { [ "${MULTI_FORCE:-0}" = 1 ] || ! grep -q "xstage_$1_gpu_tests" <<<"$MU_FAILED"; }
mu_run() { # name, limit, command...: skipped when the budget no longer holds the limit
  local name=$1 limit=$2; shift 2
  local left=$(multi_left)
  if [ ! -x "$MUX" ] || [ "$left" -lt 40 ]; then note "$name" "skipped ($left s left, or no xstage binary)"; return; fi
  [ "$limit" -gt $((left - 25)) ] && limit=$((left - 25))
  step "$name" timeout "$limit" env XSTAGE_SOURCE_DIR="$ROOT" "$@"
}
rm -f "$OUT/dit.json"
# What the model predicts for these runs, recorded before they run (no GPU work; milliseconds).
for mu_case in "flux-like 4096" "wan-like 75600"; do
  read -r mu_preset mu_tokens <<<"$mu_case"
  env XSTAGE_SOURCE_DIR="$ROOT" "$MUX" dit --plan --preset "$mu_preset" --tokens "$mu_tokens" --gpus "$MU_P" \
    --plan-json "$OUT/dit_plan_${mu_preset}_p$MU_P.json" >"$OUT/dit_plan_${mu_preset}_p$MU_P.txt" 2>&1 || true
done
if mu_ok dit; then
  mu_run multi_dit_flux 120 "$MUX" dit --quiet --json "$OUT/dit.json" --preset flux-like --tokens 4096 --steps 2 \
    --blocks "${MULTI_DIT_BLOCKS:-4}" --gpus "$MU_P" --breakdown $(png_arg "$OUT/dit_phases_flux_p$MU_P.png")
  mu_run multi_dit_wan 150 "$MUX" dit --quiet --json "$OUT/dit.json" --preset wan-like --tokens 75600 --steps 2 \
    --blocks 2 --gpus "$MU_P" --breakdown $(png_arg "$OUT/dit_phases_wan_p$MU_P.png")
else note multi_dit "skipped: the DiT GPU tests failed"; fi
if [ "$MU_P" = 1 ]; then note multi_ulysses "skipped: one GPU"
elif mu_ok ulysses; then
  mu_run multi_ulysses 150 "$MUX" bench ulysses --ranks "$MU_P" --min-seq 4096 \
    --max-seq "${MULTI_ULYSSES_MAX_SEQ:-32768}" --samples 5 --json "$OUT/ulysses_multi.json" \
    $(png_arg "$OUT/ulysses_multi.png")
else note multi_ulysses "skipped: the Ulysses GPU tests failed"; fi
if mu_ok moe; then
  MU_MOE_LEFT=$(( $(multi_left) - 30 ))
  mu_run multi_moe "$MU_MOE_LEFT" "$MUX" bench moe --sweep "$MU_MOE_SWEEP" --ep "$MU_P" --tokens "${MULTI_MOE_TOKENS:-2048}" --warmup 1 \
    --iters 5 --budget-s $(( MU_MOE_LEFT > 60 ? MU_MOE_LEFT - 45 : 15 )) --json "$OUT/moe_multi.json" \
    $(png_arg "$OUT/moe_multi.png")
else note multi_moe "skipped: the MoE GPU tests failed"; fi
for f in dit.json ulysses_multi.json ulysses_multi.png moe_multi.json moe_multi.png; do
  [ -f "$OUT/$f" ] && cp "$OUT/$f" "$FINAL_OUT/"
done
python3 - "$OUT" <<'PY' | tee "$OUT/multi_table.txt"
import json, math, os, sys
out = sys.argv[1]
def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None
f = lambda v, s="{:.3f}": "-" if v is None else s.format(v)
d = load("dit.json")
if d:
    print("---- xstage dit (ms per step; speedup = serial / fused; diff = max |x_P - x_1|) ----")
    for r in d["rows"]:
        print(f"{r['preset']:<10} {r['tokens']:>6} P={r['P']} blocks={r['blocks']} single {f(r.get('single_step_ms'))} "
              f"serial {f(r.get('serial_step_ms'))} fused {f(r.get('fused_step_ms'))} speedup {f(r.get('speedup'))} "
              f"diff {f(r.get('max_abs_diff_vs_single_gpu'), '{:.2e}')}")
u = load("ulysses_multi.json")
if u:
    print("---- bench ulysses (ms; speedup = serial / fused sender-visible) ----")
    for r in u["rows"]:
        print(f"S={r['S']:>6} P={r['P']} H={r['H']:>2} D={r['D']:>3} attn {f(r.get('attention_ms'))} serial "
              f"{f(r.get('serial_ms'))} torch {f(r.get('torch_serial_ms'))} fused {f(r.get('fused_sender_ms'))} / "
              f"{f(r.get('fused_receiver_ms'))} speedup {f(r.get('speedup_vs_serial'))}")
m = load("moe_multi.json")
if m:
    rows = m["rows"]
    print(f"---- bench moe: {len(rows)} rows; IL/EW geomean {f(m.get('geomean_speedup'))} max {f(m.get('max_speedup'))}; "
          f"all correct: {m.get('all_correct')} ----")
    fu = [r["fused_over_unfused"] for r in rows if r.get("fused_over_unfused")]
    if fu:
        print(f"fused/unfused geomean {math.exp(sum(map(math.log, fu)) / len(fu)):.3f} (min {min(fu):.3f}, max {max(fu):.3f})")
PY
note multi_stage "$(( $(date +%s) - MULTI_T0 )) s of $MULTI_BUDGET (P = $MU_P)"
