#!/usr/bin/env bash
# Every bad input of docs/reliability.md's gait table, end to end: each case must exit
# non-zero, print one line naming the input, the field and the reason, and leave the
# files it could touch byte for byte as they were (and create none).
# Usage: bad_input_test.sh GAIT_BINARY SOURCE_DIR HAVE_TORCH(0|1) [TABLE.md]
#   TABLE.md, when given, receives one markdown row per case (the docs' table).
set -uo pipefail
GAIT=$1
SRC=$2
TORCH=$3
TABLE=${4:-/dev/null}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
CFG="$SRC/gait/configs/tiny-cpu.json"
failures=0
: >"$TABLE"

# A fingerprint of files and folders: every path with its checksum.
fingerprint() {
  for p in "$@"; do
    if [ -e "$p" ]; then find "$p" -printf '%p %y\n' | sort; find "$p" -type f -exec md5sum {} + | sort; else echo "absent $p"; fi
  done
}

# check ID CLASS 'PROTECTED PATHS' 'EXPECTED MESSAGE' CMD...
check() {
  local id=$1 class=$2 protected=$3 want=$4
  shift 4
  # shellcheck disable=SC2086
  local before; before=$(fingerprint $protected)
  "$@" >"$T/out.txt" 2>"$T/err.txt"
  local rc=$?
  # shellcheck disable=SC2086
  local after; after=$(fingerprint $protected)
  local msg; msg=$(tail -n 1 "$T/err.txt")
  local lines; lines=$(wc -l <"$T/err.txt")
  local stages; stages=$(find "$T" -name '.*.stage-*' | wc -l)
  local ok=1 why=""
  [ "$rc" -ne 0 ] || { ok=0; why="exit 0"; }
  grep -qF -- "$want" "$T/err.txt" || { ok=0; why="$why; message lacks '$want'"; }
  [ "$lines" -eq 1 ] || { ok=0; why="$why; $lines lines on stderr"; }
  [ "$before" = "$after" ] || { ok=0; why="$why; files changed"; }
  [ "$stages" -eq 0 ] || { ok=0; why="$why; a staging folder was left"; }
  local shown="${*:2}"
  shown=${shown//$T\//}
  shown=${shown//$SRC\//}
  msg=${msg//$T\//}
  printf '| %s | %s | `gait %s` | %s | %s | %s |\n' "$id" "$class" "$shown" "$rc" "${msg//|/\\|}" \
    "$([ "$before" = "$after" ] && echo untouched || echo CHANGED)" >>"$TABLE"
  if [ "$ok" -eq 1 ]; then echo "ok   $id"; else echo "FAIL $id:$why" >&2; cat "$T/err.txt" >&2; failures=$((failures + 1)); fi
}

# ---- fixtures: a small dataset, its index and cache; a broken capture folder
"$GAIT" synth --small --views 0,90 --out d --no-progress >/dev/null || exit 1
"$GAIT" index d --json idx.json >/dev/null || exit 1
"$GAIT" preprocess d --cache cache --no-progress >/dev/null || exit 1
mkdir -p empty badmocap/01 afolder.npy
printf 'HIERARCHY\nROOT Hips\n{\n OFFSET 0 0 0\n CHANNELS 6 Xposition\n' >badmocap/01/01_01.bvh
cp "$SRC/gait/data/mocap/07/07_01.bvh" badmocap/01/01_02.bvh
echo '{"base": "'"$CFG"'", "optimizer": {"lr": 1e999}}' >inf.json

# ---- numbers: out of range, with the unit
check N1 numbers "" "--iterations: 0 iterations is below the minimum 1" "$GAIT" train --config "$CFG" --data d --out r0 --iterations 0
check N2 numbers "" "--iterations: -5 iterations is below the minimum 1" "$GAIT" train --config "$CFG" --data d --out r0 --iterations -5
check N3 numbers "" "--threads: -3 threads is below the minimum 0 threads" "$GAIT" train --config "$CFG" --data d --out r0 --threads -3
check N4 numbers "" "--max-minutes: -1 minutes is below the minimum 0 minutes" "$GAIT" train --config "$CFG" --data d --out r0 --max-minutes -1
check N5 numbers "s1" "--threads: -2 threads is below the minimum 0" "$GAIT" synth --out s1 --subjects 1 --threads -2
check N6 numbers "s0" "--subjects: 0 subjects is out of range (1 .. 999 subjects)" "$GAIT" synth --out s0 --subjects 0
check N7 numbers "s1" "--views: 200 degrees is out of range (0 .. 180 degrees)" "$GAIT" synth --out s1 --views 200
check N8 numbers "cache" "--test-from 200: the cache's subjects end at 008" "$GAIT" baseline --cache cache --test-from 200
check N9 numbers "cache" "--test-from: 0 subject id is out of range" "$GAIT" baseline --cache cache --test-from 0
check N10 numbers "cache" "--threads: -2 threads is below the minimum 0" "$GAIT" preprocess d --cache cache --threads -2
check N11 numbers "st.png" "--count: 0 frames is out of range (1 .. 1000 frames)" "$GAIT" strip d --subject 1 --walk 90 --count 0 --out st.png
check N12 numbers "st.png" "--subject: 0 subject id is out of range" "$GAIT" strip d --subject 0 --out st.png
check N13 numbers "mp" "--step: 0 frames is out of range (1 .. 1000 frames)" "$GAIT" mocap-pack --from "$SRC/gait/data/mocap" --out mp --step 0

# ---- files and folders: kind, existence
check K1 files "" "--config: $T/empty: is a folder, not a file" "$GAIT" train --config "$T/empty" --data d
check K2 files "" "afolder.npy: is a folder, not a file" "$GAIT" eval --embeddings afolder
check K3 files "" "root: d/synth.json: is a file, not a folder" "$GAIT" index d/synth.json
check K4 files "" "root: missing: no such folder" "$GAIT" preprocess missing --cache c9
check K5 files "d" "--results: $T/empty: is a directory" "$GAIT" synth --out s1 --subjects 1 --views 90 --results "$T/empty"
check K6 files "" "--mocap: nowhere: no such folder" "$GAIT" mocap --mocap nowhere
echo "not json" >notjson.json
check K8 files "notjson.json" "--results notjson.json: exists and is not a JSON object; not replacing it" "$GAIT" synth --out s1 --subjects 1 --views 90 --results notjson.json

# ---- files left or overwritten by a failed command
check W1 outputs "idx.json" "empty: no usable sequence" "$GAIT" index empty --json idx.json
check W2 outputs "cache" "empty: nothing usable to cache" "$GAIT" preprocess empty --cache cache --force --no-progress
check W3 outputs "newcache" "empty: nothing usable to cache" "$GAIT" preprocess empty --cache newcache --no-progress
check W4 outputs "d" "badmocap: found 1 clean gait cycles" "$GAIT" synth --out d --force --subjects 1 --mocap badmocap --no-progress
check W6 outputs "mp" "badmocap/01/01_01.bvh: unexpected end of file" "$GAIT" mocap-pack --from badmocap --out mp
check W7 outputs "badmocap" "the output folder badmocap/packed and the capture folder badmocap overlap" "$GAIT" mocap-pack --from badmocap --out badmocap/packed

# ---- messages that name their cause
check M1 messages "" "badmocap/01/01_01.bvh: unexpected end of file" "$GAIT" mocap --mocap badmocap
check M2 messages "" "inf.json: not valid JSON" "$GAIT" train --config inf.json --data d --out r0

# ---- sets: duplicates
check S1 sets "s1" "--views: 90 is given twice" "$GAIT" synth --out s1 --subjects 1 --views 90,90
check S2 sets "st.png" "--views: 90 is given twice" "$GAIT" strip d --subject 1 --views 90,90 --out st.png

if [ "$TORCH" = 1 ]; then
  # ---- model fixtures: a 2-iteration run, its dump, and files made from them
  "$GAIT" train --config "$CFG" --data d --out run --iterations 2 --threads 2 --no-progress >/dev/null || exit 1
  "$GAIT" eval --ckpt run/latest.gckpt --dump-embeddings emb --threads 2 --no-progress >/dev/null || exit 1
  python3 "$SRC/gait/tests/bad_files.py" run/latest.gckpt emb || exit 1
  echo '{"base": "'"$CFG"'", "optimizer": {"lr": 1e30}}' >nan.json
  echo '{"base": "'"$CFG"'", "optimizer": {"lr": 1e40}}' >inf_weights.json
  check N14 numbers "run" "--top: 0 identities is below the minimum 1" "$GAIT" identify --ckpt run/latest.gckpt --gallery emb --data d --top 0 007-cl-01-090
  check N15 numbers "run" "--threads: -1 threads is below the minimum 0" "$GAIT" eval --ckpt run/latest.gckpt --threads -1
  check N16 numbers "run" "--skeleton-scale: -1 x the skeleton head is out of range" "$GAIT" eval --ckpt run/latest.gckpt --skeleton-scale -1
  check N17 numbers "" "--frames: 2 frames is out of range (3 .. 100000 frames)" "$GAIT" bench-infer --config "$CFG" --frames 2
  check F1 non-finite "e1" "nan.npy: row 1 (006-nm-01-000): value" "$GAIT" eval --embeddings nan --out e1
  check F2 non-finite "" "nan.npy: row 1 (006-nm-01-000): value" "$GAIT" identify --ckpt run/latest.gckpt --gallery nan --data d 007-cl-01-090
  check F3 non-finite "run" "the loss is not finite (nan)" "$GAIT" train --config nan.json --data d --out run --force --iterations 5 --threads 2 --no-progress
  check F4 non-finite "fresh" "the loss is not finite (nan)" "$GAIT" train --config nan.json --data d --out fresh --iterations 5 --threads 2 --no-progress
  check F5 non-finite "fresh" "iteration 1: the training step failed: value cannot be converted to type float without overflow" "$GAIT" train --config inf_weights.json --data d --out fresh --iterations 1 --threads 2 --no-progress
  check I1 inconsistent "e1" "dup.csv: rows 1 and 2 both hold sequence 006-nm-01-000" "$GAIT" eval --embeddings dup --out e1
  check I2 inconsistent "e1" "cond.csv: row 1: condition 'xx' is not nm, bg or cl" "$GAIT" eval --embeddings cond --out e1
  check I3 inconsistent "e1" "neg.gckpt: impossible checkpoint: iteration -3 is negative" "$GAIT" eval --ckpt neg.gckpt --out e1
  check I4 inconsistent "run" "neg.gckpt: impossible checkpoint: iteration -3 is negative" "$GAIT" train --config "$CFG" --data d --out run --resume-from neg.gckpt --iterations 3
  check I5 inconsistent "e1" "shape.gckpt: the weights do not fit the stored config: 'fc.weight'" "$GAIT" eval --ckpt shape.gckpt --out e1
  check I6 inconsistent "e1" "dupclass.gckpt: impossible checkpoint: classes: 1 is given twice" "$GAIT" eval --ckpt dupclass.gckpt --out e1
  check I7 inconsistent "tf" "--scales: 1 is given twice" "$GAIT" tune-fusion --ckpt run/latest.gckpt --data d --scales 1 1 --out tf
  check W5 outputs "run/latest.gckpt" "eval: --out run/latest.gckpt: run/latest.gckpt is not a directory" "$GAIT" eval --ckpt run/latest.gckpt --out run/latest.gckpt
  check K7 files "" "--ckpt: $T/empty: is a folder, not a file" "$GAIT" eval --ckpt "$T/empty"
fi

echo "bad inputs: $failures failure(s)"
[ "$failures" -eq 0 ]
