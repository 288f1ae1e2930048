#!/usr/bin/env bash
# The accelerator machine's one script: build with CUDA, run the GPU tests, the
# sanitizer and the benchmarks, and write everything under $OUT (default out/device).
#   ./run device [STAGES...]    stages: env build test sanitize probe all (default all)
# Environment: GPUS (probe GPU counts, default "all visible"; e.g. "2 4"),
#              SWEEP (standard|quick, default standard), GAIT=ON to build gait too.
# Prints a short table last; full logs and results go to $OUT/device-run.tgz
# (the lent machine returns at most 8 files, so everything travels in one archive).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FINAL_OUT=${OUT:-$ROOT/out}
OUT=$ROOT/out/device-run
rm -rf "$OUT"; mkdir -p "$OUT" "$FINAL_OUT"
BUILD=${BUILD_DIR:-$ROOT/build-device}
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
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
tar czf "$FINAL_OUT/device-run.tgz" -C "$ROOT/out" device-run
echo
echo "==== device summary ($(date -u +%F) $NGPU GPU(s)) ===="
printf '%s\n' "${SUMMARY[@]}"
