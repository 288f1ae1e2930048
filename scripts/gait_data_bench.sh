#!/usr/bin/env bash
# Times the full synthetic CASIA-B generation (124 subjects x 10 sequences x 11 views)
# on 2 threads and writes docs/results/gait-data.json (date, command,
# full_generation_seconds, sequences, frames, joint_in_silhouette_fraction,
# mocap_subjects_used, and the machine's CPU count and load average at start and end).
#
#   scripts/gait_data_bench.sh                 # BUILD_DIR=build, output under out/gait-full
#   BUILD_DIR=build-gait OUT=/tmp/full THREADS=2 scripts/gait_data_bench.sh
#
# The dataset itself (~1.2 M PNG files) stays in OUT; delete it when done.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
OUT=${OUT:-$ROOT/out/gait-full}
THREADS=${THREADS:-2}
RESULTS=${RESULTS:-$ROOT/docs/results/gait-data.json}
GAIT="$BUILD_DIR/gait/cli/gait"
if [ ! -x "$GAIT" ]; then
  (cd "$ROOT" && BUILD_DIR="$BUILD_DIR" ./run build)
fi
mkdir -p "$(dirname "$RESULTS")"
"$GAIT" synth --out "$OUT" --subjects 124 --seed 1 --motion mixed --threads "$THREADS" --force \
  --results "$RESULTS"
"$GAIT" index "$OUT" | tail -n 4
echo "wrote $RESULTS"
