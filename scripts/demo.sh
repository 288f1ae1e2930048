#!/usr/bin/env bash
# ./run demo: the main job on the embedded default.
#  - xstage: with GPUs, run a short live probe sweep first; then fit the Burst-Gap
#    model, validate it on held-out points and plot (from the embedded H200 sweep
#    when no GPU is present).
set -euo pipefail
BUILD_DIR=$1; shift || true
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUTDIR=${DEMO_OUT:-$ROOT/out/demo}
mkdir -p "$OUTDIR"
XS="$BUILD_DIR/xstage/cli/xstage"
"$XS" demo --data "$ROOT/xstage/data" --out "$OUTDIR" "$@"
