#!/usr/bin/env bash
# The GaitGL timing baseline (gait/baselines/gaitgl_train_timing.py) on the CPU at tiny
# sizes: its self-checks (folded local conv = per-strip conv, batch-all triplet loss =
# its loop definition), a few bf16-autocast training steps with finite losses, and a
# JSON with the keys the device stage reads. Exit 77 (ctest: skipped) when no python3
# here imports torch (python3-torch).
#   gaitgl_smoke_test.sh SOURCE_DIR
set -euo pipefail
SRC=$1
PY=""
for p in "${GAIT_TORCH_PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$p" ] && command -v "$p" >/dev/null && "$p" -c "import torch" 2>/dev/null && { PY=$p; break; }
done
[ -n "$PY" ] || { echo "skipped: no python3 that imports torch (install python3-torch)"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$PY" "$SRC/gait/baselines/gaitgl_train_timing.py" --device cpu --smoke --threads 1 --json "$TMP/r.json"
"$PY" "$SRC/gait/baselines/gaitgl_train_timing.py" --device cpu --smoke --threads 1 --local fold --precision fp32 >/dev/null
"$PY" - "$TMP/r.json" <<'PYEOF'
import json, math, sys
r = json.load(open(sys.argv[1]))
for k in ("seq_per_s", "median_step_ms", "p10_step_ms", "p90_step_ms", "first_loss", "last_loss"):
    assert isinstance(r[k], float) and math.isfinite(r[k]) and (k.endswith("loss") or r[k] > 0), (k, r[k])
assert r["timed_steps"] == 2 and r["batch_p"] * r["batch_k"] == 4 and r["precision"] == "bf16", r
print("gaitgl smoke ok:", round(r["seq_per_s"], 1), "seq/s on the CPU (tiny sizes)")
PYEOF
