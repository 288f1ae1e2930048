#!/usr/bin/env bash
# ./run demo: the main job on the embedded default.
#   xstage: with GPUs (and a CUDA build), probe this node live first, over NVLink (two
#           GPUs) and the host link (the standard sweep takes seconds); without, use
#           the committed H200 sweep
#           (xstage/data/h200_sweep.csv). Then fit the Burst-Gap model, validate it
#           on held-out points, plot, and print example predictions.
# Outputs land in out/demo/ (DEMO_OUT to change).
set -euo pipefail
BUILD_DIR=$1; shift || true
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUTDIR=${DEMO_OUT:-$ROOT/out/demo}
mkdir -p "$OUTDIR"
XS="$BUILD_DIR/xstage/cli/xstage"

# ---- xstage -----------------------------------------------------------------
SWEEP_ARGS=()
ngpu=$("$XS" info 2>/dev/null | sed -n 's/^gpus: //p')
if "$XS" info 2>/dev/null | grep -q '^cuda: yes' && [ "${ngpu:-0}" -ge 1 ]; then
  gpus=$(( ngpu >= 2 ? 2 : 1 ))
  patterns=local,host
  [ "$gpus" -ge 2 ] && patterns=local,peer,host
  echo "==> $ngpu GPU(s) found: probing live on $gpus GPU(s) first ($patterns)"
  "$XS" probe --gpus "$gpus" --sweep standard --pattern "$patterns" --out "$OUTDIR/live" --force
  SWEEP_ARGS=(--sweep "$OUTDIR/live/sweep.csv")
else
  echo "==> no GPU (or no CUDA build): using the embedded H200 sweep"
fi
"$XS" demo --data "$ROOT/xstage/data" --out "$OUTDIR" "${SWEEP_ARGS[@]}" "$@"

# ---- gait: the tiny CPU pipeline (gait/configs/tiny-cpu.json), when the build has LibTorch
# synth --small (8 subjects) -> train -> CASIA-B evaluation -> gallery -> identify -> inference timing.
# Outputs in $OUTDIR/gait/; docs/gait-model.md explains them.
GAIT="$BUILD_DIR/gait/cli/gait"
GAIT_HELP=$([ -x "$GAIT" ] && "$GAIT" --help 2>&1 || true)
if [ -n "$GAIT_HELP" ] && [[ "$GAIT_HELP" != *"unavailable: built without LibTorch"* ]]; then
  G="$OUTDIR/gait"
  mkdir -p "$G"
  echo "==> gait: synthetic dataset (--small), tiny two-branch model, CASIA-B evaluation"
  # Made afresh every time (~20 s): a set left by an older build may come from an older generator.
  "$GAIT" synth --small --out "$G/synth-small" --force
  rm -rf "$G/tiny"
  "$GAIT" train --config "$ROOT/gait/configs/tiny-cpu.json" --data "$G/synth-small" --out "$G/tiny"
  "$GAIT" eval --ckpt "$G/tiny/latest.gckpt" --out "$G/tiny/eval" --dump-embeddings "$G/tiny/eval/embeddings"
  "$GAIT" embed --ckpt "$G/tiny/latest.gckpt" --gallery-set --out "$G/tiny/gallery" --no-progress
  "$GAIT" identify --ckpt "$G/tiny/latest.gckpt" --gallery "$G/tiny/gallery" --data "$G/synth-small" 007-cl-01-090
  "$GAIT" bench-infer --config "$ROOT/gait/configs/tiny-cpu.json" --device cpu --json "$G/bench_infer.json"
else
  echo "==> gait: skipped (this build has no LibTorch; ./run deps installs libtorch-dev)"
fi
