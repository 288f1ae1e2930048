# Stage `gait` (the gait GPU rows), sourced by scripts/device.sh:
#
#   RUN_NAME=gait ./run device gait
#
# In one bounded call: build the gait CLI against python3's LibTorch (CUDA), generate
# the 124-subject procedural dataset and preprocess it, train the five variants of
# gait/configs/gpu-budget/ at the same time, spread over the visible GPUs (each process time-limited
# with --max-minutes and its cosine schedule fitted to that time), evaluate each
# (CASIA-B rank-1 NM/BG/CL), evaluate two_branch also on a `--motion cmu` set of
# captured walkers it never saw, and write the new results file $OUT/gait.json (to
# copy to docs/results/gait.json) and $OUT/gait-data.json (docs/results/gait-data.json with
# its calibration table: the generator's difficulty against real CASIA-B's). Logs, train logs, eval CSVs/heatmaps/JSON go
# under $OUT/gait/; checkpoints and datasets stay on the machine (too big to return).
#
# Environment:
#   GAIT_STAGE_SECONDS  wall-clock budget of the whole stage (default 540): training
#                       gets what is left after build and data, less the evaluation reserve
#   GAIT_EVAL_RESERVE   seconds kept for the evaluations after training (default 90)
#   GAIT_STAGE_PREP=1   only build and make both datasets (the full set and the cmu set),
#                       then stop: a second call on the still-warm machine reuses them
#                       (ignored build outputs stay between calls) and gives training the
#                       whole budget. Without a warm machine the second call remakes them.
#   GAIT_STAGE_SMOKE=1  CPU smoke test of the whole flow (the --small dataset, tiny
#                       widths, 20 iterations, CPU): how this file is tested off the GPU
#   GAIT_BUILD_DIR      build folder (default $ROOT/build-gait-stage); GAIT_DATA_DIR
#                       datasets and checkpoints (default $ROOT/out/gait-stage)
#   GAIT_CORES          cores the stage may use (default nproc; e.g. 12 when another job
#                       shares the machine): synth/preprocess threads, build jobs
#   GAIT_JOBS           build jobs (default GAIT_CORES)
#   GAIT_CUDA_GRAPH=0   train with trainer.cuda_graph false (eager steps), to replicate
#                       runs trained that way: a time-limited run's iterations depend on
#                       its step time
#   GAIT_SEED           trainer.seed of every variant (default: the configs', 1): a
#                       replicate run; the results file keeps earlier runs (previous_runs)
#                       and averages the runs made on the same generator (mean_over_runs)

gait_t0=$(date +%s)
GAIT_SMOKE=${GAIT_STAGE_SMOKE:-0}
GAIT_BUDGET=${GAIT_STAGE_SECONDS:-540}
[ "$GAIT_SMOKE" = 1 ] && GAIT_BUDGET=${GAIT_STAGE_SECONDS:-1500}
GAIT_DEADLINE=$((gait_t0 + GAIT_BUDGET))
GAIT_RESERVE=${GAIT_EVAL_RESERVE:-90}
GB=${GAIT_BUILD_DIR:-$ROOT/build-gait-stage}
GD=${GAIT_DATA_DIR:-$ROOT/out/gait-stage}
GO=$OUT/gait
GAIT_BIN=$GB/gait/cli/gait
GAIT_VARIANTS=(silhouette_only skeleton_only_natural skeleton_only_fc skeleton_only_fc_stcatt two_branch)
GAIT_CORES=${GAIT_CORES:-$(nproc)}
mkdir -p "$GO" "$GD/runs"
gait_left() { echo $((GAIT_DEADLINE - $(date +%s))); }
gait_secs() { echo $(($(date +%s) - $1)); }

# A background job for the parallel part: log to $GO/NAME.log, exit code and seconds to
# $GD/jobs/NAME.{rc,secs}; notes are made by the parent after `wait` (a subshell's
# note() would be lost).
mkdir -p "$GD/jobs"
rm -f "$GD"/jobs/*
gait_job() { # name, timeout seconds, command...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s) rc=0
  if [ "$limit" -lt 5 ]; then echo "no time left (limit ${limit}s)" >"$GO/$name.log"; rc=124
  else timeout --kill-after=10 "$limit" "$@" >"$GO/$name.log" 2>&1 || rc=$?; fi
  echo "$rc" >"$GD/jobs/$name.rc"
  gait_secs "$t0" >"$GD/jobs/$name.secs"
  return "$rc"
}
gait_job_ok() { # name: wait for a background job (while the deadline allows); true if it succeeded
  while [ ! -f "$GD/jobs/$1.rc" ] && [ "$(gait_left)" -gt 15 ]; do sleep 2; done
  [ "$(cat "$GD/jobs/$1.rc" 2>/dev/null)" = 0 ]
}
gait_note_job() {
  local name=$1 rc secs
  if [ ! -f "$GD/jobs/$name.rc" ] && [ ! -f "$GO/$name.log" ]; then  # never started
    note "gait_$name" "skipped (no time left before the stage's deadline)"; return
  fi
  rc=$(cat "$GD/jobs/$name.rc" 2>/dev/null || echo "?")
  secs=$(cat "$GD/jobs/$name.secs" 2>/dev/null || echo "?")
  if [ "$rc" = 0 ]; then note "gait_$name" "ok (${secs}s)"
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then note "gait_$name" "TIMED OUT (${secs}s) see gait/$name.log"
  else note "gait_$name" "FAILED rc=$rc (${secs}s) see gait/$name.log"; fi
}

# ---------------------------------------------------------------- build
GAIT_TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
GAIT_TORCH_VERSION=$(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo "?")
if [ "$GAIT_SMOKE" = 1 ]; then GAIT_CMAKE=(-DXSTAGE_CUDA=OFF)
else GAIT_CMAKE=(-DXSTAGE_CUDA=ON -DGAIT_TORCH=ON ${GAIT_TORCH_PREFIX:+-DCMAKE_PREFIX_PATH="$GAIT_TORCH_PREFIX"}); fi
gait_configure() { step "$1" timeout 150 cmake -S "$ROOT" -B "$GB" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DXSTAGE_BUILD_GAIT=ON "${@:2}"; }
if ! gait_configure gait_configure "${GAIT_CMAKE[@]}" && [ "$GAIT_SMOKE" != 1 ]; then
  # Fallback: without the project's CUDA targets (only LibTorch needs CUDA here).
  GB=$GB-nocuda
  GAIT_BIN=$GB/gait/cli/gait
  gait_configure gait_configure_nocuda -DXSTAGE_CUDA=OFF -DGAIT_TORCH=ON \
    ${GAIT_TORCH_PREFIX:+-DCMAKE_PREFIX_PATH="$GAIT_TORCH_PREFIX"}
fi
grep -E "gait: LibTorch|xstage: CUDA" "$OUT/gait_configure.log" | head -3
if ! step gait_build timeout 330 cmake --build "$GB" -j "${GAIT_JOBS:-$GAIT_CORES}" --target gait; then
  note gait_build_errors "$(grep -m 3 -E 'error|Error' "$OUT/gait_build.log" | cut -c1-300 | tr '\n' ' ')"
fi

# ---------------------------------------------------------------- data
if [ "$GAIT_SMOKE" = 1 ]; then
  GAIT_FULL_ARGS=(--small --motion procedural)
  GAIT_CMU_ARGS=(--small --seed 2 --motion cmu)
  GAIT_DEV_ARGS=(--small --seed 3 --motion procedural)
else
  GAIT_FULL_ARGS=(--subjects 124 --motion procedural)
  GAIT_CMU_ARGS=(--subjects 50 --seed 2 --motion cmu)
  # Development set: other procedural identities, for two_branch's `gait tune-fusion`.
  GAIT_DEV_ARGS=(--subjects 30 --seed 3 --motion procedural)
fi
# The generator's version: a hash of its sources (and of the captures' MANIFEST, whose
# labels the gait model reads) without // comments and whitespace, so
# that a dataset left by an earlier call is reused only when the same code made it, and
# the results file can tell which runs saw the same data (an edit of a comment keeps it).
GAIT_DATA_VERSION=$(export LC_ALL=C; cat "$ROOT"/gait/data/synth/*.cpp "$ROOT"/gait/include/gait/synth/*.hpp \
  "$ROOT"/gait/data/motion/*.cpp "$ROOT"/gait/data/mocap/MANIFEST.tsv 2>/dev/null | sed -e 's://.*$::' | tr -d '[:space:]' | sha1sum | cut -c1-12)
export GAIT_DATA_VERSION
gait_make_data() { # name, threads, synth args...: synth + preprocess, reused when complete
  # (exported and run through `bash -c '...'`, so that `timeout` can bound it)
  local name=$1 threads=$2; shift 2
  local d=$GD/$name want="$* (generator $GAIT_DATA_VERSION)"
  if [ -f "$d/.complete" ] && [ "$(cat "$d/.complete")" = "$want" ]; then echo "reusing $d ($want)"; return 0; fi
  rm -rf "$d"
  "$GAIT_BIN" synth --out "$d" "$@" --threads "$threads" --no-progress --results "$GO/data_$name.json" &&
    "$GAIT_BIN" preprocess "$d" --cache "$d/cache" --threads "$threads" --no-progress &&
    echo "$want" >"$d/.complete"
}
export -f gait_make_data
export GAIT_BIN GD GO
GAIT_OK=0
[ -x "$GAIT_BIN" ] && GAIT_OK=1
if [ $GAIT_OK = 1 ]; then
  step gait_data_full timeout $(($(gait_left) - 150 > 60 ? $(gait_left) - 150 : 60)) \
    bash -c 'gait_make_data "$@"' gait_make_data full "$GAIT_CORES" "${GAIT_FULL_ARGS[@]}" || GAIT_OK=0
  tail -3 "$OUT/gait_data_full.log"
fi

if [ $GAIT_OK = 1 ] && [ "${GAIT_STAGE_PREP:-0}" = 1 ]; then
  step gait_data_cmu timeout $(($(gait_left) > 60 ? $(gait_left) : 60)) \
    bash -c 'gait_make_data "$@"' gait_make_data cmu "$GAIT_CORES" "${GAIT_CMU_ARGS[@]}"
  step gait_data_dev timeout $(($(gait_left) > 60 ? $(gait_left) : 60)) \
    bash -c 'gait_make_data "$@"' gait_make_data dev "$GAIT_CORES" "${GAIT_DEV_ARGS[@]}"
  note gait_stage "prepared (build, full, cmu and dev sets) in $(gait_secs "$gait_t0")s; GAIT_STAGE_PREP=1: no training"
  GAIT_OK=prep
fi

# ---------------------------------------------------------------- train + evaluate
gait_config() { # variant -> config path (smoke: tiny widths over the budget config)
  local v=$1
  mkdir -p "$GD/configs"
  if [ "$GAIT_SMOKE" != 1 ] && [ "${GAIT_CUDA_GRAPH:-1}" != 0 ]; then echo "$ROOT/gait/configs/gpu-budget/$v.json"; return; fi
  if [ "$GAIT_SMOKE" != 1 ]; then
    echo "{ \"base\": \"$ROOT/gait/configs/gpu-budget/$v.json\", \"trainer\": { \"cuda_graph\": false } }" \
      >"$GD/configs/$v.json"
    echo "$GD/configs/$v.json"
    return
  fi
  cat >"$GD/configs/$v.json" <<EOF
{
  "base": "$ROOT/gait/configs/gpu-budget/$v.json",
  "model": { "cnn": { "channels": [4, 8, 8], "halving": 2, "parts": 16 }, "gcn": { "channels": [16, 32] },
             "fusion": { "embed_dim": 32 } },
  "scheduler": { "warmup_iterations": 5 },
  "trainer": { "iterations": 20, "batch_p": 4, "batch_k": 2, "device": "cpu", "threads": 1, "log_every": 5 },
  "data": { "loader_threads": 1 }
}
EOF
  echo "$GD/configs/$v.json"
}
# Variants in order of cost, spread round-robin over the visible GPUs (x2: two_branch,
# fc_stcatt, natural on GPU 0; silhouette_only, fc on GPU 1); each process sees one GPU.
GAIT_BY_COST=(two_branch silhouette_only skeleton_only_fc_stcatt skeleton_only_fc skeleton_only_natural)
GAIT_NGPU=1
[ "$GAIT_SMOKE" != 1 ] && GAIT_NGPU=$(nvidia-smi -L 2>/dev/null | grep -c GPU)
[ "${GAIT_NGPU:-0}" -ge 1 ] 2>/dev/null || GAIT_NGPU=1
gait_gpu_of() { # variant -> GPU index
  local i
  for i in "${!GAIT_BY_COST[@]}"; do [ "${GAIT_BY_COST[$i]}" = "$1" ] && { echo $((i % GAIT_NGPU)); return; }; done
  echo 0
}
gait_chain() { # variant, train minutes: train, then evaluate (two_branch: also on the cmu set)
  local v=$1 minutes=$2 run=$GD/runs/$1 threads=2 dev=cuda  # cuda: fail loudly rather than train on the CPU
  [ "$GAIT_SMOKE" = 1 ] && threads=1 dev=cpu
  [ "$GAIT_SMOKE" != 1 ] && export CUDA_VISIBLE_DEVICES=$(gait_gpu_of "$v")
  rm -rf "$run"; mkdir -p "$GO/$v"
  gait_job "${v}_train" $(($(gait_left) - 20)) "$GAIT_BIN" train --config "$(gait_config "$v")" --data "$GD/full" \
    --out "$run" --max-minutes "$minutes" --cache-only --threads "$threads" --device "$dev" \
    ${GAIT_SEED:+--seed "$GAIT_SEED"}
  cp "$run"/train_summary.json "$run"/train_log.csv "$run"/config.json "$GO/$v/" 2>/dev/null
  [ -f "$run/latest.gckpt" ] || return 0
  local fusion=()
  if [ "$v" = two_branch ]; then
    # Its test embedding (heads, skeleton weight) chosen on the development set, then
    # used for the test set and the cmu walkers; the other variants are done by now, so
    # the evaluations get more CPU threads for their distance matrices.
    [ "$GAIT_SMOKE" != 1 ] && threads=$((GAIT_CORES / 2 > 2 ? GAIT_CORES / 2 : 2))
    if gait_job_ok data_dev; then
      gait_job two_branch_tune_fusion $(($(gait_left) - 10)) "$GAIT_BIN" tune-fusion --ckpt "$run/latest.gckpt" \
        --data "$GD/dev" --cache-only --out "$GO/two_branch/fusion" --threads "$threads" --device "$dev" --no-progress
    else
      echo "no development set (data_dev failed or did not finish)" >"$GO/two_branch_tune_fusion.log"
      echo 1 >"$GD/jobs/two_branch_tune_fusion.rc"
    fi
    [ -f "$GO/two_branch/fusion/fusion_tuning.json" ] && fusion=(--fusion "$GO/two_branch/fusion/fusion_tuning.json")
    (
      if gait_job_ok data_cmu; then
        gait_job two_branch_eval_cmu $(($(gait_left) - 10)) "$GAIT_BIN" eval --ckpt "$run/latest.gckpt" \
          --data "$GD/cmu" --cache-only --test-all --out "$GO/two_branch/eval_cmu" --threads "$threads" \
          --device "$dev" --no-progress "${fusion[@]}"
      else
        echo "no cmu dataset (data_cmu failed or did not finish)" >"$GO/two_branch_eval_cmu.log"
        echo 1 >"$GD/jobs/two_branch_eval_cmu.rc"
      fi
    ) &
  fi
  gait_job "${v}_eval" $(($(gait_left) - 10)) "$GAIT_BIN" eval --ckpt "$run/latest.gckpt" --out "$GO/$v/eval" \
    --data "$GD/full" --cache-only --threads "$threads" --device "$dev" --no-progress "${fusion[@]}"
  if [ "$v" = two_branch ]; then
    # The same checkpoint's other test embeddings, untuned (skeleton scale 1), for the
    # table of heads, most telling first (each branch head and the fused head alone,
    # then the config's fused+branches and both branch heads); those the deadline leaves
    # no time for are skipped.
    local h hn
    for h in silhouette fused skeleton fused+branches branches; do
      [ "$(gait_left)" -gt 25 ] || break
      hn=${h//+/_and_}  # plain file names for the archive
      gait_job "two_branch_eval_$hn" $(($(gait_left) - 10)) "$GAIT_BIN" eval --ckpt "$run/latest.gckpt" \
        --heads "$h" --skeleton-scale 1 --out "$GO/two_branch/eval_heads_$hn" --data "$GD/full" --cache-only \
        --threads "$threads" --device "$dev" --no-progress
    done
  fi
  wait
}

if [ "$GAIT_OK" = 1 ]; then
  # Training gets the time up to the deadline less the evaluation reserve and ~20 s of
  # process start (reading 8,140 cached sequences); at least half a minute.
  GAIT_TRAIN_S=$(($(gait_left) - GAIT_RESERVE - 20))
  [ "$GAIT_TRAIN_S" -lt 30 ] && GAIT_TRAIN_S=30
  GAIT_MINUTES=$(awk -v s="$GAIT_TRAIN_S" 'BEGIN { printf "%.2f", s / 60 }')
  note gait_train_budget "${GAIT_MINUTES} min per variant, 5 processes on $GAIT_NGPU GPU(s) ($GAIT_CORES cores, torch $GAIT_TORCH_VERSION)"
  echo "gait: training ${GAIT_VARIANTS[*]} for ${GAIT_MINUTES} min each, concurrently"
  GAIT_MON=
  if [ "$GAIT_SMOKE" != 1 ] && command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw --format=csv -l 5 >"$GO/gpu_util.csv" 2>&1 &
    GAIT_MON=$!
  fi
  # The cmu and development sets are made meanwhile (reused after a GAIT_STAGE_PREP=1
  # call), each on an eighth of the cores (the trainers need ~1-2 each).
  gait_job data_cmu $(($(gait_left) - 60)) bash -c 'gait_make_data "$@"' gait_make_data cmu \
    $((GAIT_CORES / 8 > 1 ? GAIT_CORES / 8 : 1)) "${GAIT_CMU_ARGS[@]}" &
  GAIT_CMU_PID=$!
  gait_job data_dev $(($(gait_left) - 60)) bash -c 'gait_make_data "$@"' gait_make_data dev \
    $((GAIT_CORES / 8 > 1 ? GAIT_CORES / 8 : 1)) "${GAIT_DEV_ARGS[@]}" &
  GAIT_DEV_PID=$!
  GAIT_PIDS=()
  for v in "${GAIT_VARIANTS[@]}"; do
    gait_chain "$v" "$GAIT_MINUTES" &
    GAIT_PIDS+=($!)
  done
  for p in "${GAIT_PIDS[@]}" "$GAIT_CMU_PID" "$GAIT_DEV_PID"; do wait "$p"; done
  [ -n "$GAIT_MON" ] && kill "$GAIT_MON" 2>/dev/null
  gait_note_job data_cmu
  gait_note_job data_dev
  for v in "${GAIT_VARIANTS[@]}"; do
    gait_note_job "${v}_train"
    grep -h -E "fit_schedule_to_time|stopped at the time limit|trained to iteration" "$GO/${v}_train.log" | head -3
    gait_note_job "${v}_eval"
  done
  gait_note_job two_branch_tune_fusion
  grep -h "^best: " "$GO/two_branch_tune_fusion.log" 2>/dev/null | head -1
  gait_note_job two_branch_eval_cmu
  for h in silhouette fused skeleton fused_and_branches branches; do gait_note_job "two_branch_eval_$h"; done
elif [ "$GAIT_OK" != prep ]; then
  note gait_train "skipped: no gait binary or no dataset"
fi

# ---------------------------------------------------------------- results file
# The command as run (the reused datasets say whether a GAIT_STAGE_PREP=1 call came first).
GAIT_COMMAND="${GAIT_CUDA_GRAPH:+GAIT_CUDA_GRAPH=$GAIT_CUDA_GRAPH }${GAIT_SEED:+GAIT_SEED=$GAIT_SEED }GAIT_STAGE_SECONDS=$GAIT_BUDGET GAIT_EVAL_RESERVE=$GAIT_RESERVE RUN_NAME=${RUN_NAME:-} ./run device gait"
grep -q reusing "$OUT/gait_data_full.log" 2>/dev/null &&
  GAIT_COMMAND="$GAIT_COMMAND (build and datasets from a GAIT_STAGE_PREP=1 call just before, same machine)"
if [ "$GAIT_OK" != prep ]; then
  if [ "$GAIT_SMOKE" = 1 ]; then
    GAIT_CARD="CPU smoke test of the stage (not a result): $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $GAIT_CORES cores"
  else
    GAIT_PLACES=$(for v in "${GAIT_BY_COST[@]}"; do printf '%s ' "$v:GPU$(gait_gpu_of "$v")"; done)
    GAIT_CARD="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1); LibTorch $GAIT_TORCH_VERSION; bf16 autocast; 5 variants trained concurrently on $GAIT_NGPU GPU(s), one GPU per process (${GAIT_PLACES% }), $GAIT_CORES CPU cores"
  fi
  GAIT_DS="gait synth ${GAIT_FULL_ARGS[*]} (seed 1), gait preprocess; the CASIA-B protocol scaled to the subject count (124 subjects: train 1-74, test 75-124)"
  GAIT_CMU_DS="gait synth ${GAIT_CMU_ARGS[*]}: walkers driven by the captured CMU people, never seen in training; every subject a test identity (gait eval --test-all)"
  GAIT_DEV_DS="gait synth ${GAIT_DEV_ARGS[*]}: procedural identities neither trained on nor tested, every subject a development identity (gait tune-fusion)"
  step gait_results timeout 30 python3 "$ROOT/scripts/gait_results.py" --runs "$GO" --previous "$ROOT/docs/results/gait.json" \
    --out "$OUT/gait.json" --card "$GAIT_CARD" --date "$(date -u +%F)" --command "$GAIT_COMMAND" \
    --dataset "$GAIT_DS" --cmu-dataset "$GAIT_CMU_DS" --dev-dataset "$GAIT_DEV_DS" --data-version "$GAIT_DATA_VERSION" --seed "${GAIT_SEED:-1}" \
    --calibration-from "$ROOT/docs/results/gait-data.json" --calibration-out "$OUT/gait-data.json"
  cat "$OUT/gait_results.log" | tee "$GO/summary.md"
  while IFS= read -r line; do
    case "$line" in "| "[a-z]*|"check "*) note "gait" "$line" ;; esac
  done <"$OUT/gait_results.log"
  note gait_stage "$(gait_secs "$gait_t0")s of ${GAIT_BUDGET}s; new results file: gait.json in the archive (copy to docs/results/)"
fi
