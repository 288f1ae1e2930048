# Stage `dit` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT, $FINAL_OUT):
# the DiT denoiser on this machine's GPUs, within DIT_BUDGET_S seconds
# of wall time (default 480). DIT_TESTS=0 skips step 2 (e.g. after the onegpu stage).
#   RUN_NAME=dit ./run device dit
# 1. own build (build-dit, -j nproc): the xstage CLI and the DiT tests;
# 2. CPU tests, then GPU tests (single GPU vs the CPU reference, GELU MLP and MoE
#    FFN; P = 2 serial and fused vs P = 1, skipped on one GPU);
# 3. `xstage dit` with P = 2 when two or three GPUs are visible, P = 4 and then 2 when
#    four or more are (DIT_PS overrides, e.g. "4"; each run also does P = 1), rows into
#    $OUT/dit.json: tiny and tiny-moe (correctness: diff vs one GPU; tiny has 2 heads, so
#    P = 2 only), the timing rows flux-like (DIT_FLUX_BLOCKS blocks, default 4; 0: all),
#    dit-moe (DIT_MOE_BLOCKS blocks, default 4, 0: all; the fused MoE kernel as FFN) and
#    wan-like at 75,600 tokens (DIT_WAN_BLOCKS blocks, default 2). With P = 4 the issue's
#    must-show rows go first (flux-like and wan-like at P = 4); a row that no longer
#    fits the budget is skipped with a note; the timing rows run with --breakdown
#    (DIT_BREAKDOWN=0 leaves it out): each path's phases per step, the All-to-Alls included,
#    and each row's chart dit_phases_*.png (in the archive);
# 4. a short table of the rows, and of the timing rows' phases.
DIT_T0=$(date +%s)
DIT_BUDGET=${DIT_BUDGET_S:-480}
dit_left() { echo $((DIT_BUDGET - ($(date +%s) - DIT_T0))); }
DB=${DIT_BUILD_DIR:-$ROOT/build-dit}
DT="$DB/xstage/tests"
DX="$DB/xstage/cli/xstage"
DIT_PS=${DIT_PS:-$([ "${NGPU:-1}" -ge 4 ] && echo "4 2" || { [ "${NGPU:-1}" -ge 2 ] && echo 2 || echo 1; })}

step dit_configure timeout 90 cmake -S "$ROOT" -B "$DB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_CUDA=ON \
  -DXSTAGE_BUILD_GAIT=OFF
step dit_build timeout $(( $(dit_left) > 270 ? 240 : $(dit_left) - 30 )) \
  cmake --build "$DB" -j "$(nproc)" --target xstage xstage_dit_tests xstage_dit_gpu_tests
if [ "${DIT_TESTS:-1}" = 0 ]; then note dit_tests "skipped (DIT_TESTS=0)"; else
step dit_cpu_tests timeout 30 "$DT/xstage_dit_tests"
step dit_gpu_tests timeout 150 env XSTAGE_SOURCE_DIR="$ROOT" "$DT/xstage_dit_gpu_tests"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|velocity vs|vs P=1|timed out" "$OUT/dit_gpu_tests.log" 2>/dev/null | head -24
fi

rm -f "$OUT/dit.json"
dit_run() { # name, timeout, xstage dit arguments...
  local name=$1 limit=$2; shift 2
  local left=$(dit_left)
  if [ ! -x "$DX" ] || [ "$left" -lt 25 ]; then note "$name" "skipped ($left s left, or no xstage binary)"; return; fi
  [ "$limit" -gt $((left - 15)) ] && limit=$((left - 15))
  step "$name" timeout "$limit" env XSTAGE_SOURCE_DIR="$ROOT" "$DX" dit --quiet --json "$OUT/dit.json" "$@"
}
BD=$([ "${DIT_BREAKDOWN:-1}" = 0 ] || echo --breakdown)
bd_png() { [ -n "$BD" ] && png_arg "$OUT/dit_phases_$1.png"; }  # NAME: the chart of a --breakdown row
dit_flux() { dit_run "dit_flux_p$1" 120 --preset flux-like --tokens 4096 --steps 2 --blocks "${DIT_FLUX_BLOCKS:-4}" --gpus "$1" $BD $(bd_png "flux_p$1"); }
# wan-like at the exact 720p length: 75,600 = 21 frames x 60 x 60 tokens (P = 2, 4, 8 pad
# it to 75,776: whole 128-row tiles per rank, the padding masked as keys).
dit_wan() { dit_run "dit_wan_p$1" 150 --preset wan-like --tokens 75600 --steps 2 --blocks "${DIT_WAN_BLOCKS:-2}" --gpus "$1" $BD $(bd_png "wan_p$1"); }
for P in $DIT_PS; do  # the issue's must-shows are at P = 4: those rows first
  [ "$P" = 4 ] && { dit_flux 4; dit_wan 4; }
done
for P in $DIT_PS; do
  [ $((2 % P)) = 0 ] && dit_run "dit_tiny_p$P" 45 --preset tiny --tokens 512 --steps 4 --gpus "$P"
  dit_run "dit_tiny_moe_p$P" 45 --preset tiny-moe --tokens 512 --steps 4 --gpus "$P"
  [ "$P" != 4 ] && dit_flux "$P"
  dit_run "dit_moe_p$P" 120 --preset dit-moe --tokens 4096 --steps 2 --blocks "${DIT_MOE_BLOCKS:-4}" --gpus "$P" $BD $(bd_png "moe_p$P")
  [ "$P" != 4 ] && dit_wan "$P"
done
[ -f "$OUT/dit.json" ] && cp "$OUT/dit.json" "$FINAL_OUT/dit.json"
if [ -f "$OUT/dit.json" ]; then
  echo "---- xstage dit (ms per Euler step; speedup = serial / fused; diff = max |x_P - x_1|) ----"
  python3 - "$OUT/dit.json" <<'PY' | tee "$OUT/dit_table.txt"
import json, sys
d = json.load(open(sys.argv[1]))
f = lambda v, s="{:.3f}": "-" if v is None else s.format(v)
print(f"{'preset':<10} {'tokens':>6} {'P':>2} {'blocks':>6} | {'single':>8} {'serial':>8} {'fused':>8} | {'speedup':>7} | {'diff':>9}")
for r in d["rows"]:
    print(f"{r['preset']:<10} {r['tokens']:>6} {r['P']:>2} {r['blocks']:>6} | {f(r.get('single_step_ms')):>8} "
          f"{f(r.get('serial_step_ms')):>8} {f(r.get('fused_step_ms')):>8} | {f(r.get('speedup')):>7} | "
          f"{f(r.get('max_abs_diff_vs_single_gpu'), '{:.2e}'):>9}")
phases = ["conditioning", "qkv", "pre_a2a", "attention", "post_a2a", "proj", "ffn"]
rows = [r for r in d["rows"] if r.get("phases_ms_per_step")]
if rows:
    print("---- --breakdown: ms per step and phase (qkv and attention hold the fused path's All-to-Alls) ----")
    print(f"{'preset':<10} {'P':>2} {'path':<7} " + " ".join(f"{p:>12}" for p in phases))
    for r in rows:
        for path, ph in r["phases_ms_per_step"].items():
            print(f"{r['preset']:<10} {r['P']:>2} {path:<7} " + " ".join(f"{ph.get(p, 0):>12.3f}" for p in phases))
PY
  note dit_result "$(awk '/^---- --breakdown/{exit} NR>1 && $3>1 {printf "%s P%s speedup %s diff %s; ", $1, $3, $10, $12}' \
    "$OUT/dit_table.txt")"
fi
note dit_stage "$(( $(date +%s) - DIT_T0 )) s of $DIT_BUDGET"
