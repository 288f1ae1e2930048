#!/usr/bin/env bash
# ./run demo: the main job on the embedded default.
#   xstage: with GPUs (and a CUDA build), probe this node live first (the standard
#           sweep takes seconds); without, use the committed H200 sweep
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
  echo "==> $ngpu GPU(s) found: probing live on $gpus GPU(s) first"
  "$XS" probe --gpus "$gpus" --sweep standard --out "$OUTDIR/live" --force
  SWEEP_ARGS=(--sweep "$OUTDIR/live/sweep.csv")
else
  echo "==> no GPU (or no CUDA build): using the embedded H200 sweep"
fi
"$XS" demo --data "$ROOT/xstage/data" --out "$OUTDIR" "${SWEEP_ARGS[@]}" "$@"
