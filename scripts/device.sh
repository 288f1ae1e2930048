#!/usr/bin/env bash
# The accelerator machine's one script: build with CUDA, run the GPU tests, the
# sanitizer and the benchmarks, and write everything under $OUT (default out/device).
#   ./run device [STAGES...]    stages: env build test sanitize probe attention all (default all),
#                               plus any scripts/device.d/NAME.sh (sourced in this shell, so it can
#                               use step/note/want and $OUT/$ROOT; named stages only, not in "all")
# Environment: GPUS (probe GPU counts, default "all visible"; e.g. "2 4"),
#              SWEEP (standard|quick, default standard), GAIT=ON to build gait too,
#              ATTN_BENCH_ARGS (extra arguments of `xstage bench attention`),
#              ATTN_SANITIZE (default "memcheck racecheck"; "none" skips), ATTN_BENCH_TIMEOUT (s, default 170),
#              ATTN_BENCH_VARIANTS ("name:bench args;...": more bench runs, compared in one table).
#              RUN_NAME (default none): logs go to out/device-run[-RUN_NAME] and
#              $OUT/device-run[-RUN_NAME].tgz, so two runs (e.g. one per GPU) can go side by side.
# Prints a short table last; full logs and results go to $OUT/device-run[-RUN_NAME].tgz
# (the lent machine returns at most 8 files, so everything travels in one archive).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FINAL_OUT=${OUT:-$ROOT/out}
RUN_DIR=device-run${RUN_NAME:+-$RUN_NAME}
OUT=$ROOT/out/$RUN_DIR
rm -rf "$OUT"; mkdir -p "$OUT" "$FINAL_OUT"
BUILD=${BUILD_DIR:-$ROOT/build-device}
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# Charts need PLplot (optional: a GPU node without it runs every bench, with no --png).
CHARTS=0; pkg-config --exists plplot 2>/dev/null && CHARTS=1
png_arg() { [ "$CHARTS" = 1 ] && echo "--png $1"; }  # FILE: "--png FILE" where charts are drawn
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(all)
want() { for s in "${STAGES[@]}"; do [ "$s" = all ] || [ "$s" = "$1" ] && return 0; done; return 1; }
SUMMARY=()
note() { SUMMARY+=("$(printf '%-28s %s' "$1" "$2")"); }
step() { # name, command...: runs with a log, records pass/fail
  local name=$1; shift
  local t0=$(date +%s)
  if "$@" >"$OUT/$name.log" 2>&1; then note "$name" "ok ($(( $(date +%s) - t0 ))s)"; return 0
  else local rc=$?; note "$name" "FAILED rc=$rc ($(( $(date +%s) - t0 ))s) see $name.log"; tail -25 "$OUT/$name.log"; return $rc; fi
}

step_within() { # t0, budget (s), name, wanted seconds, command...: a stage's step within what
  # is left of its budget; skipped with a note under 20 s, so the archive is always made
  local t0=$1 budget=$2 name=$3 want=$4; shift 4
  local left=$(( budget - ($(date +%s) - t0) - 10 ))
  if [ "$left" -lt 20 ]; then note "$name" "skipped ($left s left of $budget)"; return 1; fi
  step "$name" timeout $(( want < left ? want : left )) "$@"
}

NGPU=$(nvidia-smi -L 2>/dev/null | grep -c GPU || true)
GPUS=${GPUS:-$NGPU}
if want env; then
  { nvidia-smi; nvidia-smi topo -m; nvcc --version; python3 -c 'import torch; print("torch", torch.__version__, torch.utils.cmake_prefix_path)';
    python3 -c 'import nvidia.nccl, os; print("nccl wheel", nvidia.nccl.__path__[0])' ; cmake --version; } >"$OUT/env.log" 2>&1
  note env "$NGPU GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
fi
if want build; then
  step configure cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_CUDA=ON \
    -DXSTAGE_BUILD_GAIT=${GAIT:-OFF} ${CMAKE_ARGS:-}
  step build cmake --build "$BUILD" -j "$(nproc)"
  cuobjdump --dump-resource-usage "$BUILD"/xstage/probe/libxs_probe_cuda.a >"$OUT/resource_usage.log" 2>&1 || true
fi
XS="$BUILD/xstage/cli/xstage"
if want test; then
  step ctest ctest --test-dir "$BUILD" --output-on-failure -j 1
fi
if want sanitize; then
  step sanitize_probe compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
    "$BUILD/xstage/tests/xstage_probe_gpu_tests" --gtest_filter='ProbeGpu.EveryStoreKind*'
fi
if want probe; then
  for g in $GPUS; do
    d="$OUT/probe_x$g"
    rm -rf "$d"
    if step "probe_x$g" "$XS" probe --gpus "$g" --sweep "${SWEEP:-standard}" --out "$d" --quiet; then
      [ -x "$XS" ] && "$XS" fit "$d/sweep.csv" -o "$d/params.json" --holdout 0.3 --report "$d/report.json" \
        >"$OUT/fit_x$g.log" 2>&1 && note "fit_x$g" "ok" || note "fit_x$g" "failed (see fit_x$g.log)"
    fi
  done
fi
if want attention; then
  # Self-contained: its own build (LibTorch SDPA baselines on), the attention
  # tests, the resource report and SASS checks, the sanitizers on a small case,
  # then the bench. Each step has a time limit so the archive always gets made.
  AB=${ATTN_BUILD_DIR:-$ROOT/build-attention}
  TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
  step attn_configure cmake -S "$ROOT" -B "$AB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_CUDA=ON \
    -DXSTAGE_BUILD_GAIT=OFF -DXSTAGE_TORCH_BASELINES=ON ${TORCH_PREFIX:+-DCMAKE_PREFIX_PATH="$TORCH_PREFIX"}
  grep -E "SDPA baselines|LibTorch" "$OUT/attn_configure.log" | head -3
  step attn_build cmake --build "$AB" -j "$(nproc)" --target xstage xstage_attention_tests \
    xstage_attention_hopper_gpu_tests xstage_attention_gpu_tests
  AT="$AB/xstage/tests"
  step attn_cpu_tests "$AT/xstage_attention_tests"
  step attn_hopper_tests timeout 60 "$AT/xstage_attention_hopper_gpu_tests"
  step attn_gpu_tests timeout 150 "$AT/xstage_attention_gpu_tests"
  grep -E "^\[  (FAILED|PASSED) |Failure|rel L2|max \|ours|LSE mis|left NaN|timed out" "$OUT/attn_gpu_tests.log" | head -40
  cuobjdump --dump-resource-usage "$AB/xstage/attention/libxs_attention.a" >"$OUT/attention_resource_usage.log" 2>&1
  cuobjdump --dump-sass "$AB/xstage/attention/libxs_attention.a" >"$OUT/attention.sass" 2>&1
  awk '/Function : /{f=($3 ~ /flash_fwd_kernel/) ? $3 : ""} f&&/HGMMA/{h[f]++} f&&/(LDL|STL)/{l[f]++}
       END{for(k in h) printf "%s HGMMA=%d LDL/STL=%d\n", k, h[k], l[k]+0}' "$OUT/attention.sass" >"$OUT/attention_sass_check.log"
  note attn_sass "$(awk '{printf "%s %s; ", $2, $3}' "$OUT/attention_sass_check.log")"
  SAN_TOOLS=${ATTN_SANITIZE:-memcheck racecheck}
  [ "$SAN_TOOLS" = none ] && SAN_TOOLS=""
  for tool in $SAN_TOOLS; do
    step "attn_$tool" timeout 75 compute-sanitizer --tool "$tool" --error-exitcode 9 "$AT/xstage_attention_gpu_tests" \
      --gtest_filter='AttentionGpu.SanitizerCase'
  done
  XSA="$AB/xstage/cli/xstage"
  BASE_ARGS=()
  if ! grep -q "SDPA baselines enabled" "$OUT/attn_configure.log"; then
    step attn_sdpa_python timeout 150 python3 "$ROOT/xstage/attention/torch_baseline/sdpa_baseline.py" \
      --out "$OUT/sdpa_python.json" --reps 10 --budget-ms 100 && BASE_ARGS=(--baselines-json "$OUT/sdpa_python.json")
  fi
  step attn_bench timeout ${ATTN_BENCH_TIMEOUT:-170} "$XSA" bench attention --reps 10 --budget-ms 100 \
    --json "$OUT/attention.json" "${BASE_ARGS[@]}" ${ATTN_BENCH_ARGS:-}
  # Variants of our kernel in the same run: "name:extra args;name:extra args".
  CMP=(default="$OUT/attention.json")
  IFS=';' read -ra VARIANTS <<<"${ATTN_BENCH_VARIANTS:-}"
  for v in "${VARIANTS[@]}"; do
    [ -z "$v" ] && continue
    vn=${v%%:*}; va=${v#*:}
    # shellcheck disable=SC2086
    step "attn_bench_$vn" timeout ${ATTN_BENCH_TIMEOUT:-170} "$XSA" bench attention --reps 10 --budget-ms 100 \
      --json "$OUT/attention_$vn.json" "${BASE_ARGS[@]}" $va
    CMP+=("$vn=$OUT/attention_$vn.json")
  done
  if [ -f "$OUT/attention.json" ]; then
    echo "---- bench attention (TFLOPs; ratios to the best SDPA backend) ----"
    python3 "$ROOT/xstage/attention/bench_compare.py" "${CMP[@]}" | tee "$OUT/attention_compare.txt" | cut -c1-140
  fi
fi
for s in "${STAGES[@]}"; do
  if [ -f "$ROOT/scripts/device.d/$s.sh" ]; then
    # shellcheck disable=SC1090
    source "$ROOT/scripts/device.d/$s.sh"
  elif [[ " env build test sanitize probe attention all " != *" $s "* ]]; then
    note "$s" "unknown stage (named stages: $(cd "$ROOT/scripts/device.d" && ls *.sh | sed 's/\.sh$//' | tr '\n' ' '))"
  fi
done
tar czf "$FINAL_OUT/$RUN_DIR.tgz" -C "$ROOT/out" "$RUN_DIR"
echo
echo "==== device summary${RUN_NAME:+ [$RUN_NAME]} ($(date -u +%F) $NGPU GPU(s)) ===="
printf '%s\n' "${SUMMARY[@]}"
# A failed step (or an unknown stage name) makes the whole call fail, after the archive and
# the summary, so a caller that reads only the exit status is not told "ok".
FAILED=$(printf '%s\n' "${SUMMARY[@]}" | grep -cE ' (FAILED rc=|unknown stage \()' || true)
if [ "$FAILED" -gt 0 ]; then
  echo "device: $FAILED step(s) failed or unknown (above)"
  exit 1
fi
