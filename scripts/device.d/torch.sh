# Stage `torch` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT): the PyTorch
# operators (libxstage_torch.so, python/xstage) on one H200 with python3's PyTorch.
#   RUN_NAME=torch ./run device torch
# 1. own build (TORCH_BUILD_DIR, default build-torch-device): CUDA on, LibTorch from
#    python3's torch (torch.utils.cmake_prefix_path), libxstage_torch.so and the xstage CLI;
# 2. the Python tests on the GPU (XSTAGE_TEST_DEVICE=cuda: the sm_90a attention kernel, the
#    fused MoE kernel against the CPU reference, torch.compile of both operators), again
#    with the attention's torch-op reference forced (XSTAGE_TORCH_ATTENTION=reference), and
#    on the CPU; with TORCH_GAIT=1 the build also has the gait library and CLI, and the
#    tests include xstage.gait (test_gait.py: the model on the GPU against the CLI's CPU run);
# 3. examples/torch_attention.py at TORCH_SEQ_K (default 16,32; heads 24, D 128):
#    non-causal with torch.compile of the block, then causal -> torch_attention*.json;
# 4. TORCH_ROUNDS (default 3) rounds of `xstage bench attention` (the kernel's own time,
#    both masks) then the operator alone (--op-only, non-causal and causal), and the bench
#    once more at the end;
# 5. the table: per row the median of the operator's times over the rounds against the
#    median of the kernel's, both in steady state; kernel / op >= 0.97 passes for S >= 16K;
#    the error against SDPA, compile.
# The stage stays within TORCH_BUDGET_S seconds (default 560, one device call): each step's
# limit is cut to what is left, and a step with under 20 s left is skipped with a note,
# so the archive is always made. A build left from an earlier call is reused.
TORCH_END=$(( $(date +%s) + ${TORCH_BUDGET_S:-560} - 10 ))
t_step() { # name, wanted seconds, command...
  local name=$1 want=$2 left=$(( TORCH_END - $(date +%s) )); shift 2
  [ "$left" -ge 20 ] || { note "$name" "skipped ($left s left of TORCH_BUDGET_S)"; return 1; }
  step "$name" timeout $(( want < left ? want : left )) "$@"
}
TB=${TORCH_BUILD_DIR:-$ROOT/build-torch-device}
TPY=$(command -v python3)
TORCH_PREFIX=$("$TPY" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
TSEQ_K=${TORCH_SEQ_K:-16,32}
TSEQ=$(echo "$TSEQ_K" | tr ',' '\n' | awk '{printf "%s%d", (NR > 1 ? "," : ""), $1 * 1024}')
TENV=(env PYTHONPATH="$TB/python" XSTAGE_SOURCE_DIR="$ROOT")
TGAIT_TARGETS=()
if [ "${TORCH_GAIT:-0}" = 1 ]; then TGAIT_TARGETS=(gait); TENV+=(GAIT_CLI="$TB/gait/cli/gait"); fi

t_step torch_configure 240 cmake -S "$ROOT" -B "$TB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_CUDA=ON \
  -DXSTAGE_BUILD_GAIT="$([ ${#TGAIT_TARGETS[@]} -gt 0 ] && echo ON || echo OFF)" -DXSTAGE_TORCH_OPS=ON \
  -DXSTAGE_TORCH_PYTHON="$TPY" \
  ${TORCH_PREFIX:+-DCMAKE_PREFIX_PATH="$TORCH_PREFIX"}
grep -E "xstage torch|LibTorch|Torch" "$OUT/torch_configure.log" | head -4
t_step torch_build 560 cmake --build "$TB" -j "$(nproc)" --target xstage_torch xstage "${TGAIT_TARGETS[@]}"
"$TPY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' >"$OUT/torch_env.log" 2>&1
note torch_env "$(cat "$OUT/torch_env.log" | tail -1); $("${TENV[@]}" "$TPY" -c 'import xstage; print(xstage.build_info())' 2>&1 | tail -1)"

UT=(-m unittest discover -v -s "$ROOT/python/tests" -p 'test_*.py')
t_step torch_tests_gpu 300 "${TENV[@]}" XSTAGE_TEST_DEVICE=cuda "$TPY" "${UT[@]}"
t_step torch_tests_gpu_reference 200 "${TENV[@]}" XSTAGE_TEST_DEVICE=cuda XSTAGE_TORCH_ATTENTION=reference \
  "$TPY" "${UT[@]}" -k Attention
t_step torch_tests_cpu 200 "${TENV[@]}" XSTAGE_TEST_DEVICE=cpu "$TPY" "${UT[@]}"
grep -hE "^(FAIL|ERROR):|^Ran |^OK|^FAILED" "$OUT"/torch_tests_*.log | head -20

# The kernel's own time and the operator's, in TORCH_ROUNDS alternating rounds (bench, then
# the operator alone, non-causal and causal), and the bench once more at the end: under
# sustained load the card's clock moves between about 1350 and 1980 MHz (torch_clocks.csv),
# so one sample of each, minutes apart, can differ by several percent for that reason alone.
# The table takes the median over the rounds of each side. Both sides in steady state: the
# bench warms up 100 launches per row, the operator is called for 1 s before its samples
# (examples/torch_attention.py --op-only).
TROUNDS=${TORCH_ROUNDS:-3}
TBENCH=("$TB/xstage/cli/xstage" bench attention --seq "$TSEQ" --heads 24 --dims 128 --causal both --warmup 100
  --reps 40 --budget-ms 2000 --baselines off)
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv -lms 500 >"$OUT/torch_clocks.csv" 2>&1 &
CLOCKS_PID=$!
t_step torch_example 420 "${TENV[@]}" "$TPY" "$ROOT/examples/torch_attention.py" --seq "$TSEQ" --heads 24 \
  --head-dim 128 --json "$OUT/torch_attention.json"
t_step torch_example_causal 240 "${TENV[@]}" "$TPY" "$ROOT/examples/torch_attention.py" --seq "$TSEQ" \
  --heads 24 --head-dim 128 --causal --no-compile --json "$OUT/torch_attention_causal.json"
for r in $(seq 1 "$TROUNDS"); do
  t_step "torch_bench_r$r" 300 "${TBENCH[@]}" --json "$OUT/torch_bench_r$r.json"
  for c in "" --causal; do
    t_step "torch_op${c:+_causal}_r$r" 120 "${TENV[@]}" "$TPY" "$ROOT/examples/torch_attention.py" --seq "$TSEQ" \
      --heads 24 --head-dim 128 $c --op-only --warmup-ms 1000 --reps 40 --json "$OUT/torch_op${c:+_causal}_r$r.json"
  done
done
t_step torch_bench_end 300 "${TBENCH[@]}" --json "$OUT/torch_bench_end.json"
kill "$CLOCKS_PID" 2>/dev/null

"$TPY" - "$OUT" >"$OUT/torch_table.txt" 2>&1 <<'PYEOF'
import glob, json, os, statistics, sys
out = sys.argv[1]
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
def rows_of(pattern):
    return [r for f in sorted(glob.glob(os.path.join(out, pattern))) for r in (load(os.path.basename(f)) or {}).get("rows", [])]
def median_by_key(rows, key, value):
    got = {}
    for r in rows:
        if r.get(value):
            got.setdefault(key(r), []).append(r[value])
    return {k: (statistics.median(v), min(v), max(v), len(v)) for k, v in got.items()}
kernel = median_by_key(rows_of("torch_bench_*.json"), lambda r: (r["S"], r["D"], r["heads"], bool(r["causal"])), "ours_ms")
op_alone = median_by_key(rows_of("torch_op_r*.json") + rows_of("torch_op_causal_r*.json"),
                         lambda r: (r["S"], r["D"], r["heads"], bool(r["causal"])), "op_ms")
print(f"{'S':>6} {'causal':>6} {'op ms (median, range, n)':>30} {'kernel ms (median, range, n)':>30} {'kernel/op':>9} "
      f"{'SDPA ms':>8} {'err':>8}  verdict")
verdicts = []
for name in ("torch_attention.json", "torch_attention_causal.json"):
    ex = load(name)
    for r in (ex or {}).get("rows", []):
        key = (r["S"], r["D"], r["heads"], bool(r["causal"]))
        op, k = op_alone.get(key), kernel.get(key)
        ratio = k[0] / op[0] if k and op else None
        ok = ratio is not None and (ratio >= 0.97 or r["S"] < 16384)
        verdicts.append(ok)
        cell = lambda m: f"{m[0]:7.3f} ({m[1]:.3f}-{m[2]:.3f}, {m[3]})" if m else f"{'-':>30}"
        print(f"{r['S']:>6} {str(r['causal']):>6} {cell(op):>30} {cell(k):>30} "
              f"{(f'{ratio:9.3f}' if ratio else f'{chr(45):>9}')} {r.get('sdpa_ms', 0):>8.3f} {r['attn_rel_err']:>8.1e}  "
              f"{'ok' if ok else 'BELOW 0.97' if ratio else 'no bench row'}")
    if ex:
        print(f"{name}: torch.compile {ex['compile']}")
print("all rows ok" if verdicts and all(verdicts) else "NOT all rows ok")
PYEOF
cat "$OUT/torch_table.txt"
note torch_speed "$(tail -1 "$OUT/torch_table.txt")"
note torch_compile "$(grep -h 'torch.compile' "$OUT/torch_table.txt" | head -1 | cut -c1-120)"
