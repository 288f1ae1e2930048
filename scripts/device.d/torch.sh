# Stage `torch` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT): the PyTorch
# operators (libxstage_torch.so, python/xstage) on one H200 with python3's PyTorch.
#   RUN_NAME=torch ./run device torch
# 1. own build (TORCH_BUILD_DIR, default build-torch-device): CUDA on, LibTorch from
#    python3's torch (torch.utils.cmake_prefix_path), libxstage_torch.so and the xstage CLI;
# 2. the Python tests on the GPU (XSTAGE_TEST_DEVICE=cuda: the sm_90a attention kernel, the
#    fused MoE kernel against the CPU reference, torch.compile of both operators), again
#    with the attention's torch-op reference forced (XSTAGE_TORCH_ATTENTION=reference), and
#    on the CPU;
# 3. `xstage bench attention` at TORCH_SEQ_K (default 16,32; heads 24, D 128, both masks):
#    the kernel's own time -> torch_bench.json (and torch_bench_after.json after step 4);
# 4. examples/torch_attention.py at the same shapes (non-causal with torch.compile of the
#    block, then causal) -> torch_attention.json, torch_attention_causal.json;
# 5. the table: per row the operator's median time against the bench's kernel time
#    before and after the operator's, both in steady state (the bench after 100 launches,
#    the operator alone after 1 s of calls: examples/torch_attention.py --op-only), mean
#    kernel / op >= 0.97 passes for S >= 16K; the error against SDPA, compile.
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

t_step torch_configure 240 cmake -S "$ROOT" -B "$TB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_CUDA=ON \
  -DXSTAGE_BUILD_GAIT=OFF -DXSTAGE_TORCH_OPS=ON -DXSTAGE_TORCH_PYTHON="$TPY" \
  ${TORCH_PREFIX:+-DCMAKE_PREFIX_PATH="$TORCH_PREFIX"}
grep -E "xstage torch|LibTorch|Torch" "$OUT/torch_configure.log" | head -4
t_step torch_build 560 cmake --build "$TB" -j "$(nproc)" --target xstage_torch xstage
"$TPY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' >"$OUT/torch_env.log" 2>&1
note torch_env "$(cat "$OUT/torch_env.log" | tail -1); $("${TENV[@]}" "$TPY" -c 'import xstage; print(xstage.build_info())' 2>&1 | tail -1)"

UT=(-m unittest discover -v -s "$ROOT/python/tests" -p 'test_*.py')
t_step torch_tests_gpu 300 "${TENV[@]}" XSTAGE_TEST_DEVICE=cuda "$TPY" "${UT[@]}"
t_step torch_tests_gpu_reference 200 "${TENV[@]}" XSTAGE_TEST_DEVICE=cuda XSTAGE_TORCH_ATTENTION=reference \
  "$TPY" "${UT[@]}" -k Attention
t_step torch_tests_cpu 200 "${TENV[@]}" XSTAGE_TEST_DEVICE=cpu "$TPY" "${UT[@]}"
grep -hE "^(FAIL|ERROR):|^Ran |^OK|^FAILED" "$OUT"/torch_tests_*.log | head -20

# The kernel's own time before and after the operator's: the GPU's clock under sustained
# load drifts by several percent, so the table takes the operator against both.
# Both sides in steady state: the bench warms up 100 launches per row, the operator is
# called for 1 s before its samples (examples/torch_attention.py --op-only).
TBENCH=("$TB/xstage/cli/xstage" bench attention --seq "$TSEQ" --heads 24 --dims 128 --causal both --warmup 100
  --reps 40 --budget-ms 2000 --baselines off)
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv -lms 500 >"$OUT/torch_clocks.csv" 2>&1 &
CLOCKS_PID=$!
t_step torch_bench 300 "${TBENCH[@]}" --json "$OUT/torch_bench.json"
t_step torch_example 420 "${TENV[@]}" "$TPY" "$ROOT/examples/torch_attention.py" --seq "$TSEQ" --heads 24 \
  --head-dim 128 --json "$OUT/torch_attention.json"
t_step torch_example_causal 240 "${TENV[@]}" "$TPY" "$ROOT/examples/torch_attention.py" --seq "$TSEQ" \
  --heads 24 --head-dim 128 --causal --no-compile --json "$OUT/torch_attention_causal.json"

for c in "" --causal; do
  t_step "torch_op${c:+_causal}" 120 "${TENV[@]}" "$TPY" "$ROOT/examples/torch_attention.py" --seq "$TSEQ" --heads 24 \
    --head-dim 128 $c --op-only --warmup-ms 1000 --reps 40 --json "$OUT/torch_op${c:+_causal}.json"
done
t_step torch_bench_after 300 "${TBENCH[@]}" --json "$OUT/torch_bench_after.json"
kill "$CLOCKS_PID" 2>/dev/null

"$TPY" - "$OUT" >"$OUT/torch_table.txt" 2>&1 <<'PYEOF'
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
def kernel_ms(name):
    return {(r["S"], r["D"], r["heads"], bool(r["causal"])): r["ours_ms"] for r in (load(name) or {}).get("rows", [])}
before, after = kernel_ms("torch_bench.json"), kernel_ms("torch_bench_after.json")
print(f"{'S':>6} {'causal':>6} {'op ms':>8} {'kernel ms':>15} {'kernel/op':>13} {'SDPA ms':>8} {'err':>8}  verdict")
print(f"{'':>6} {'':>6} {'':>8} {'before  after':>15} {'before after':>13}")
op_alone = {}
for name in ("torch_op.json", "torch_op_causal.json"):
    for r in (load(name) or {}).get("rows", []):
        op_alone[(r["S"], r["D"], r["heads"], r["causal"])] = r.get("op_ms")
verdicts = []
for name in ("torch_attention.json", "torch_attention_causal.json"):
    ex = load(name)
    for r in (ex or {}).get("rows", []):
        key = (r["S"], r["D"], r["heads"], r["causal"])
        op, ks = op_alone.get(key), [m.get(key) for m in (before, after)]
        ratios = [k / op if k and op else None for k in ks]
        # The operator against the mean of the two kernel runs.
        ks_ok = [k for k in ks if k]
        ratio = sum(ks_ok) / len(ks_ok) / op if ks_ok and op else None
        ok = ratio is not None and (ratio >= 0.97 or r["S"] < 16384)
        verdicts.append(ok)
        fmt = lambda x, w: f"{x:{w}.3f}" if x else f"{'-':>{w}}"
        print(f"{r['S']:>6} {str(r['causal']):>6} {op or 0:>8.3f} {fmt(ks[0], 7)} {fmt(ks[1], 7)} "
              f"{fmt(ratios[0], 6)} {fmt(ratios[1], 6)} {r.get('sdpa_ms', 0):>8.3f} {r['attn_rel_err']:>8.1e}  "
              f"{'ok' if ok else 'BELOW 0.97' if ratio else 'no bench row'}")
    if ex:
        print(f"{name}: torch.compile {ex['compile']}")
print("all rows ok" if verdicts and all(verdicts) else "NOT all rows ok")
PYEOF
cat "$OUT/torch_table.txt"
note torch_speed "$(tail -1 "$OUT/torch_table.txt")"
note torch_compile "$(grep -h 'torch.compile' "$OUT/torch_table.txt" | head -1 | cut -c1-120)"
