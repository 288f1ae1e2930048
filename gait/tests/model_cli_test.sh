#!/usr/bin/env bash
# End-to-end smoke test of the model sub-commands on a small generated dataset:
#   synth (8 subjects, 2 views) -> train 2 iterations -> resume to 3 -> eval (+ dump)
#   -> the same table recomputed from the dump -> gallery -> identify -> tune-fusion on a
#   second (development) set and eval with its choice; and a strict-config error.
# Usage: model_cli_test.sh GAIT_BINARY SOURCE_DIR
set -euo pipefail
GAIT=$1
SRC=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
CFG="$SRC/gait/configs/tiny-cpu.json"
step() { echo "--- $*"; }

step synth
"$GAIT" synth --small --views 0,90 --out "$T/data" --no-progress >/dev/null
step train
"$GAIT" train --config "$CFG" --data "$T/data" --out "$T/run" --iterations 2 --threads 1 --no-progress
test -f "$T/run/latest.gckpt" && test -f "$T/run/train_log.csv"
step resume
"$GAIT" train --config "$CFG" --data "$T/data" --out "$T/run" --iterations 3 --threads 1 --resume --no-progress \
  | tee "$T/resume.txt"
grep -q "resumed from .* at iteration 2" "$T/resume.txt"
grep -q "trained to iteration 3" "$T/resume.txt"
step eval
"$GAIT" eval --ckpt "$T/run/latest.gckpt" --dump-embeddings "$T/emb" --threads 1 --no-progress | tee "$T/eval.txt"
for f in rank1_per_view.csv rank1_matrix.csv rank1_summary.csv rank1.json rank1_heatmap.png; do test -s "$T/run/eval/$f"; done
test -s "$T/emb.npy" && test -s "$T/emb.csv"
step eval from the dump
"$GAIT" eval --embeddings "$T/emb" --out "$T/re" >"$T/re.txt"
diff <(grep -E '^(NM|BG|CL) ' "$T/eval.txt") <(grep -E '^(NM|BG|CL) ' "$T/re.txt")
step embed + identify
"$GAIT" embed --ckpt "$T/run/latest.gckpt" --gallery-set --out "$T/gallery" --no-progress
"$GAIT" identify --ckpt "$T/run/latest.gckpt" --gallery "$T/gallery" --data "$T/data" 007-cl-01-090 | tee "$T/id.txt"
grep -q "the probe's own subject 007 ranks" "$T/id.txt"
"$GAIT" identify --ckpt "$T/run/latest.gckpt" --gallery "$T/gallery" "$T/data/silhouettes/008/bg-01/000" >/dev/null
step tune-fusion
"$GAIT" synth --subjects 3 --seed 3 --views 0,90 --out "$T/dev" --no-progress >/dev/null
"$GAIT" tune-fusion --ckpt "$T/run/latest.gckpt" --data "$T/dev" --scales 0 0.5 1 --out "$T/fusion" --threads 1 \
  --no-progress | tee "$T/tune.txt"
grep -q "^best: heads " "$T/tune.txt"
for f in fusion_tuning.json fusion_tuning.csv fusion_tuning.png; do test -s "$T/fusion/$f"; done
test "$(wc -l <"$T/fusion/fusion_tuning.csv")" -eq 8  # header + fused + 2 x 3 scales
"$GAIT" eval --ckpt "$T/run/latest.gckpt" --fusion "$T/fusion/fusion_tuning.json" --out "$T/tuned" --threads 1 \
  --no-progress >/dev/null
python3 - "$T/fusion/fusion_tuning.json" "$T/tuned/rank1.json" <<'PY'
import json, sys
best = json.load(open(sys.argv[1]))["best"]
got = json.load(open(sys.argv[2]))
assert (got["heads"], got["skeleton_scale"]) == (best["heads"], best["skeleton_scale"]), (got, best)
PY
if "$GAIT" tune-fusion --ckpt "$T/run/latest.gckpt" --data "$T/data" --no-progress 2>"$T/err3.txt"; then exit 1; fi
grep -q "the development set must hold other identities" "$T/err3.txt"
step strict config
echo '{"base": "'"$CFG"'", "model": {"gcn": {"stc_attn": true}}}' >"$T/bad.json"
if "$GAIT" train --config "$T/bad.json" --data "$T/data" 2>"$T/err.txt"; then exit 1; fi
grep -q "unknown key 'model.gcn.stc_attn'" "$T/err.txt"
step truncated checkpoint
head -c 1000 "$T/run/latest.gckpt" >"$T/short.gckpt"
if "$GAIT" eval --ckpt "$T/short.gckpt" 2>"$T/err2.txt"; then exit 1; fi
grep -q "truncated checkpoint" "$T/err2.txt"
echo "model CLI: ok"
