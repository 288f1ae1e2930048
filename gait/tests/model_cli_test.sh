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
test -f "$T/run/latest.gckpt" && test -f "$T/run/train_log.csv" && test -s "$T/run/train_curves.png"
step resume
"$GAIT" train --config "$CFG" --data "$T/data" --out "$T/run" --iterations 3 --threads 1 --resume --no-progress \
  | tee "$T/resume.txt"
grep -q "resumed from .* at iteration 2" "$T/resume.txt"
grep -q "trained to iteration 3" "$T/resume.txt"
step outputs refused before the work
# A finished run is not overwritten by a fresh one; a bad output path fails before any data is read.
cp "$T/run/latest.gckpt" "$T/kept.gckpt" && cp "$T/run/train_log.csv" "$T/kept_log.csv"
if "$GAIT" train --config "$CFG" --data "$T/data" --out "$T/run" --iterations 2 --threads 1 --no-progress 2>"$T/e1.txt"; then exit 1; fi
grep -q "holds a checkpoint (latest.gckpt): --resume continues that run, --force" "$T/e1.txt"
cmp "$T/run/latest.gckpt" "$T/kept.gckpt" && cmp "$T/run/train_log.csv" "$T/kept_log.csv"
if "$GAIT" train --config "$CFG" --data "$T/data" --out "$T/run" --resume --force --no-progress 2>"$T/e0.txt"; then exit 1; fi
grep -q "does not go with --resume" "$T/e0.txt"
touch "$T/afile"
if "$GAIT" train --config "$CFG" --data "$T/data" --out "$T/afile/run" --no-progress 2>"$T/e2.txt"; then exit 1; fi
grep -q -- "--out: $T/afile/run: $T/afile is not a directory" "$T/e2.txt"
if "$GAIT" train --config "$CFG" --data "$T/data" --out "$T/fresh" --resume --no-progress 2>"$T/e3.txt"; then exit 1; fi
grep -q "resume: $T/fresh holds no checkpoint" "$T/e3.txt"
if "$GAIT" eval --ckpt "$T/run/latest.gckpt" --out "$T/afile" --no-progress >"$T/o4.txt" 2>"$T/e4.txt"; then exit 1; fi
grep -q "eval: --out $T/afile: $T/afile is not a directory" "$T/e4.txt"
! grep -q "embedded" "$T/o4.txt"  # refused before embedding anything
if "$GAIT" eval --ckpt "$T/run/latest.gckpt" --dump-embeddings "$T/afile/emb" --no-progress 2>"$T/e5.txt"; then exit 1; fi
grep -q "eval: --dump-embeddings $T/afile/emb.npy: $T/afile is not a directory" "$T/e5.txt"
if "$GAIT" embed --ckpt "$T/run/latest.gckpt" --gallery-set --out "$T/afile/g" --no-progress 2>"$T/e6.txt"; then exit 1; fi
grep -q "embed: --out" "$T/e6.txt"
step eval
"$GAIT" eval --ckpt "$T/run/latest.gckpt" --dump-embeddings "$T/emb" --threads 1 --no-progress | tee "$T/eval.txt"
for f in rank1_per_view.csv rank1_matrix.csv rank1_summary.csv rank1.json rank1_heatmap.png; do test -s "$T/run/eval/$f"; done
test -s "$T/emb.npy" && test -s "$T/emb.csv"
step eval from the dump
"$GAIT" eval --embeddings "$T/emb" --out "$T/re" >"$T/re.txt"
diff <(grep -E '^(NM|BG|CL) ' "$T/eval.txt") <(grep -E '^(NM|BG|CL) ' "$T/re.txt")
step eval every checkpoint of the run
"$GAIT" eval --checkpoints "$T/run/checkpoints" --threads 1 --no-progress | tee "$T/byit.txt"
for f in rank1_by_iteration.csv rank1_by_iteration.json rank1_by_iteration.png; do test -s "$T/run/eval_by_iteration/$f"; done
# iterations 2 and 3 (the first run and the resumed one); the last row is the latest checkpoint's table
test "$(cut -d, -f1 "$T/run/eval_by_iteration/rank1_by_iteration.csv" | tr '\n' ' ')" = "iteration 2 3 "
last=$(tail -n 1 "$T/run/eval_by_iteration/rank1_by_iteration.csv" | cut -d, -f3-5)
test "$last" = "$(tail -n +2 "$T/run/eval/rank1_summary.csv" | cut -d, -f2 | paste -sd,)"
if "$GAIT" eval --checkpoints "$T/data" --no-progress 2>"$T/e8.txt"; then exit 1; fi
grep -q -- "--checkpoints $T/data: no iter-\*.gckpt files" "$T/e8.txt"
if "$GAIT" eval --checkpoints "$T/run/checkpoints" --ckpt "$T/run/latest.gckpt" 2>"$T/e9.txt"; then exit 1; fi
grep -q -- "--ckpt excludes --checkpoints" "$T/e9.txt"
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
step identify a sequence of another dataset
# Not the checkpoint's dataset and not cached: found by its folder, preprocessed on the fly.
"$GAIT" identify --ckpt "$T/run/latest.gckpt" --gallery "$T/gallery" "$T/dev/silhouettes/002/nm-01/090" | tee "$T/id2.txt"
grep -qE "^probe 002-nm-01-090 \([1-9][0-9]* frames\) against" "$T/id2.txt"
if "$GAIT" identify --ckpt "$T/run/latest.gckpt" --gallery "$T/gallery" "$T/dev/silhouettes/002/nm-09/090" 2>"$T/e7.txt"; then exit 1; fi
grep -q "no sequence 002-nm-09-090 in this dataset" "$T/e7.txt"
# A folder given relative to the working directory has its dataset above it too.
(cd "$T/dev/silhouettes" && "$GAIT" identify --ckpt "$T/run/latest.gckpt" --gallery "$T/gallery" 002/nm-01/090) | tee "$T/id3.txt"
cmp "$T/id2.txt" "$T/id3.txt"
step bench-infer
"$GAIT" bench-infer --config "$CFG" --frames 3 --repeats 2 --warmup 0 --threads 1 --json "$T/bench.json" >/dev/null
python3 - "$T/bench.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["frames"] == 3 and j["runs"] == 2 and j["threads"] == 1, j
assert 0 < j["p10_ms"] <= j["median_ms"] <= j["p90_ms"], j
PY
step strict config
echo '{"base": "'"$CFG"'", "model": {"gcn": {"stc_attn": true}}}' >"$T/bad.json"
if "$GAIT" train --config "$T/bad.json" --data "$T/data" 2>"$T/err.txt"; then exit 1; fi
grep -q "unknown key 'model.gcn.stc_attn'" "$T/err.txt"
step truncated checkpoint
head -c 1000 "$T/run/latest.gckpt" >"$T/short.gckpt"
if "$GAIT" eval --ckpt "$T/short.gckpt" 2>"$T/err2.txt"; then exit 1; fi
grep -q "truncated checkpoint" "$T/err2.txt"
step train --force over the finished run
"$GAIT" train --config "$CFG" --data "$T/data" --out "$T/run" --iterations 1 --threads 1 --force --no-progress \
  | tee "$T/force.txt"
grep -q "^--force: removed [1-9][0-9]* checkpoint(s) of the earlier run" "$T/force.txt"
grep -q "trained to iteration 1 " "$T/force.txt"
test "$(ls "$T/run/checkpoints")" = "iter-0000001.gckpt"  # none of the earlier run's is left
echo "model CLI: ok"
