# Stage `gait_speed` (training throughput), sourced by scripts/device.sh:
#
#   RUN_NAME=gait_speed ./run device gait_speed
#
# In one call on one GPU, one process at a time, at the same batch (P x K = 8 x 8
# sequences), clip length (30 frames of 64x44) and precision (bf16 autocast):
#   0. the gait CUDA tests (gait_net_tests --gtest_filter=CudaGraph.*: graph-captured
#      steps train like eager ones);
#   1. `gait train` of gait/configs/gpu-budget/silhouette_only.json and two_branch.json
#      for GAIT_SPEED_ITERS iterations, logging every step (train_log.csv's seq_per_s is
#      one step's batch / wall time, the step ending with the loss read back, so the
#      device has finished it; data loading and copies are inside the step), then a
#      trainer.profile_phases run of GAIT_SPEED_PROFILE_ITERS (default 100) steps of each
#      (median ms per phase of the eager operations: where the time goes);
#   2. the PyTorch eager GaitGL baseline (gait/baselines/gaitgl_train_timing.py), its
#      usual per-strip local convolution, then the folded form (the same arithmetic);
#   3. scripts/gait_speed_results.py: $OUT/gait_speed.json and a table (sequences/s =
#      batch / mean step after the warm-up, median step ms, ratios to the baseline), and
#      $OUT/gait.json: docs/results/gait.json with these figures (scripts/gait_results.py --speed).
# The first GAIT_SPEED_WARMUP steps of every run are not counted (cuDNN autotuning).
#
# Environment:
#   GAIT_SPEED_ITERS (default 400), GAIT_SPEED_WARMUP (default 50)
#   GAIT_BUILD_DIR, GAIT_DATA_DIR  as the `gait` stage (default build-gait-stage,
#                  out/gait-stage): its build and its full dataset are reused when a
#                  `gait` call left them on the warm machine; else a 16-subject set is made
#   GAIT_SPEED_SMOKE=1  the flow on the CPU at tiny sizes (how this file is tested off the GPU)

gs_t0=$(date +%s)
GS_SMOKE=${GAIT_SPEED_SMOKE:-0}
GS_ITERS=${GAIT_SPEED_ITERS:-400}
GS_WARMUP=${GAIT_SPEED_WARMUP:-50}
GS_PROFILE_ITERS=${GAIT_SPEED_PROFILE_ITERS:-100}
GS_B=${GAIT_BUILD_DIR:-$ROOT/build-gait-stage}
GS_D=${GAIT_DATA_DIR:-$ROOT/out/gait-stage}
GS_O=$OUT/gait_speed
GS_BIN=$GS_B/gait/cli/gait
GS_PY=python3
mkdir -p "$GS_O" "$GS_D"
[ "$GS_SMOKE" = 1 ] && GS_ITERS=6 GS_WARMUP=2 GS_PROFILE_ITERS=3
python3 -c 'import torch' 2>/dev/null || GS_PY=/usr/bin/python3  # pyenv shims may hide Debian's torch

# ---------------------------------------------------------------- build (reused when present)
if [ ! -x "$GS_BIN" ]; then
  GS_CMAKE=(-DXSTAGE_CUDA=OFF)
  if [ "$GS_SMOKE" != 1 ]; then
    GS_PREFIX=$("$GS_PY" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
    GS_CMAKE=(-DXSTAGE_CUDA=OFF -DGAIT_TORCH=ON ${GS_PREFIX:+-DCMAKE_PREFIX_PATH="$GS_PREFIX"})
  fi
  step gait_speed_configure timeout 150 cmake -S "$ROOT" -B "$GS_B" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DXSTAGE_BUILD_GAIT=ON "${GS_CMAKE[@]}"
  step gait_speed_build timeout 400 cmake --build "$GS_B" -j "$(nproc)" --target gait
fi
if [ "$GS_SMOKE" != 1 ]; then
  step gait_speed_test_build timeout 300 cmake --build "$GS_B" -j "$(nproc)" --target gait_net_tests
  step gait_speed_cuda_tests timeout 300 env XSTAGE_SOURCE_DIR="$ROOT" "$GS_B/gait/tests/gait_net_tests" \
    --gtest_filter='CudaGraph.*'
fi

# ---------------------------------------------------------------- data (any set with >= 8 training identities)
GS_DATA=$GS_D/full
if [ ! -f "$GS_DATA/.complete" ]; then
  GS_DATA=$GS_D/speed
  if [ ! -f "$GS_DATA/.complete" ]; then
    rm -rf "$GS_DATA"
    step gait_speed_data timeout 240 bash -c '"$1" synth --out "$2" --subjects 16 --motion procedural --threads "$3" \
      --no-progress && "$1" preprocess "$2" --cache "$2/cache" --threads "$3" --no-progress && touch "$2/.complete"' \
      _ "$GS_BIN" "$GS_DATA" "$(nproc)"
  fi
fi

# ---------------------------------------------------------------- gait train, one run at a time
gs_config() { # name, variant, extra trainer keys (JSON members) -> a config over the budget one:
  # every step logged, no time limit
  local v=$2 f=$GS_O/config_$1.json extra=""
  [ -n "${3:-}" ] && extra=", $3"
  if [ "$GS_SMOKE" = 1 ]; then
    cat >"$f" <<EOF
{ "base": "$ROOT/gait/configs/gpu-budget/$v.json",
  "model": { "cnn": { "channels": [4, 8, 8], "halving": 2, "parts": 16 }, "gcn": { "channels": [16, 32] },
             "fusion": { "embed_dim": 32 } },
  "trainer": { "iterations": $GS_ITERS, "batch_p": 4, "batch_k": 2, "log_every": 1, "save_every": 1000000,
               "max_minutes": 0, "fit_schedule_to_time": false, "device": "cpu", "threads": 1$extra },
  "data": { "loader_threads": 1 } }
EOF
  else
    cat >"$f" <<EOF
{ "base": "$ROOT/gait/configs/gpu-budget/$v.json",
  "trainer": { "iterations": $GS_ITERS, "log_every": 1, "save_every": 1000000, "max_minutes": 0,
               "fit_schedule_to_time": false$extra } }
EOF
  fi
  echo "$f"
}
gs_train() { # name, variant, extra trainer keys
  rm -rf "$GS_O/$1"
  step "gait_speed_$1" timeout 240 "$GS_BIN" train --config "$(gs_config "$1" "$2" "${3:-}")" --data "$GS_DATA" \
    --out "$GS_O/$1" --cache-only --threads 2 --device "$GS_DEV" --no-progress
  rm -rf "$GS_O/$1/checkpoints" "$GS_O/$1"/latest.*  # only the log and the summary travel
}
GS_DEV=cuda
[ "$GS_SMOKE" = 1 ] && GS_DEV=cpu
for v in silhouette_only two_branch; do
  # Timed as configured, then a trainer.profile_phases run of GS_PROFILE_ITERS steps
  # (where a step's time goes).
  gs_train "run_$v" "$v"
  gs_iters=$GS_ITERS GS_ITERS=$GS_PROFILE_ITERS
  gs_train "prof_$v" "$v" '"profile_phases": true'
  GS_ITERS=$gs_iters
done

# ---------------------------------------------------------------- the PyTorch eager baseline
GS_BASE=(--warmup "$GS_WARMUP" --steps $((GS_ITERS - GS_WARMUP)) --precision bf16)
[ "$GS_SMOKE" = 1 ] && GS_BASE=(--smoke --device cpu --threads 1)
for local in loop fold; do
  step "gait_speed_gaitgl_$local" timeout 180 "$GS_PY" "$ROOT/gait/baselines/gaitgl_train_timing.py" \
    "${GS_BASE[@]}" --local "$local" --json "$GS_O/gaitgl_$local.json"
done

# ---------------------------------------------------------------- results
if [ "$GS_SMOKE" = 1 ]; then GS_CARD="CPU smoke test of the stage (not a result): $(nproc) cores"
else GS_CARD="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1); torch $("$GS_PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)"; fi
step gait_speed_results timeout 30 "$GS_PY" "$ROOT/scripts/gait_speed_results.py" --runs "$GS_O" --warmup "$GS_WARMUP" \
  --out "$OUT/gait_speed.json" --card "$GS_CARD" --date "$(date -u +%F)" \
  --command "GAIT_SPEED_ITERS=$GS_ITERS GAIT_SPEED_WARMUP=$GS_WARMUP RUN_NAME=${RUN_NAME:-} ./run device gait_speed"
cat "$OUT/gait_speed_results.log"
# docs/results/gait.json with these throughputs (train_seq_per_s, baseline_gaitgl_seq_per_s,
# speed): $OUT/gait.json, to copy there; the `gait` stage keeps them when it rewrites it.
[ -f "$OUT/gait_speed.json" ] && step gait_speed_gait_json timeout 30 python3 "$ROOT/scripts/gait_results.py" \
  --speed "$OUT/gait_speed.json" --previous "$ROOT/docs/results/gait.json" --out "$OUT/gait.json" \
  --card "$GS_CARD" --date "$(date -u +%F)" --command "gait_speed stage"
while IFS= read -r line; do
  case "$line" in "| run "*) ;; "| "[a-z]*) note gait_speed "$line" ;; esac  # rows, not the header
done <"$OUT/gait_speed_results.log"
note gait_speed_stage "$(($(date +%s) - gs_t0))s; gait_speed.json in the archive"
