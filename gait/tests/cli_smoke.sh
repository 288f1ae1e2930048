#!/usr/bin/env bash
# End-to-end check of the `gait` data commands and their exit codes:
# synth -> refused rerun -> index -> preprocess -> strip; bad input and unwritable outputs exit non-zero.
set -euo pipefail
GAIT=$1
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
fail() { echo "cli_smoke: $*" >&2; exit 1; }

"$GAIT" synth --out "$DIR/ds" --subjects 2 --views 0,90 --no-progress --results "$DIR/r.json"
grep -q '"sequences": 40' "$DIR/r.json" || fail "expected 40 sequences in the results file"
# A rerun into the same results file keeps the keys other scripts wrote there.
sed -i '1s/^{$/{ "calibration": [1],/' "$DIR/r.json"
"$GAIT" synth --out "$DIR/ds2" --subjects 1 --views 90 --no-progress --results "$DIR/r.json" >/dev/null
grep -q '"calibration"' "$DIR/r.json" || fail "a rerun dropped the results file's other keys"
grep -q '"sequences": 10' "$DIR/r.json" || fail "a rerun did not update the results file"
rm -rf "$DIR/ds2"
if "$GAIT" synth --out "$DIR/ds" --subjects 1 --views 90 --no-progress 2>"$DIR/err"; then fail "overwrote a non-empty folder"; fi
grep -q -- "--force" "$DIR/err" || fail "refusal does not mention --force"
"$GAIT" index "$DIR/ds" --json "$DIR/index.json" >"$DIR/index.txt"
grep -q "40 sequences (40 with silhouettes, 40 with pose, 40 with both)" "$DIR/index.txt" || fail "index counts"
"$GAIT" preprocess "$DIR/ds" --cache "$DIR/cache" --no-progress >"$DIR/pre.txt"
grep -q "cache: 40 written" "$DIR/pre.txt" || fail "preprocess counts"
"$GAIT" baseline --cache "$DIR/cache" --test-from 1 >"$DIR/baseline.txt"
grep -q "test subjects 1..2 (2), identical views excluded" "$DIR/baseline.txt" || fail "baseline: $(cat "$DIR/baseline.txt")"
[ "$(grep -cE '^ +(NM|BG|CL) \| +[0-9.]+ +[0-9.]+ \| +[0-9.]+$' "$DIR/baseline.txt")" = 3 ] || fail "baseline table"
"$GAIT" strip "$DIR/ds" --subject 1 --views 0,90 --out "$DIR/strip.png" >/dev/null
[ -s "$DIR/strip.png" ] || fail "no strip"
if "$GAIT" index "$DIR/missing" 2>/dev/null; then fail "index of a missing folder succeeded"; fi
mkdir -p "$DIR/empty"
if "$GAIT" preprocess "$DIR/empty" --cache "$DIR/c2" --no-progress >/dev/null 2>&1; then fail "preprocess of nothing succeeded"; fi
# Output paths that cannot be written are refused before the scan, and nothing is written.
if "$GAIT" index "$DIR/ds" --json "$DIR/cache" >"$DIR/o1.txt" 2>"$DIR/e1"; then fail "index wrote JSON over a folder"; fi
grep -q "index: --json $DIR/cache: is a directory" "$DIR/e1" || fail "index --json message: $(cat "$DIR/e1")"
[ ! -s "$DIR/o1.txt" ] || fail "index scanned before refusing its --json"
if "$GAIT" preprocess "$DIR/ds" --cache "$DIR/strip.png/c" --no-progress 2>"$DIR/e2"; then fail "preprocess into a file"; fi
grep -q "strip.png is not a directory" "$DIR/e2" || fail "preprocess --cache message: $(cat "$DIR/e2")"
if "$GAIT" strip "$DIR/ds" --subject 1 --out "$DIR/strip.png/x.png" 2>"$DIR/e3"; then fail "strip under a file"; fi
grep -q "strip: --out" "$DIR/e3" || fail "strip --out message: $(cat "$DIR/e3")"
# The capture commands: what the generator learns, and the compact copy (from the
# embedded captures, which the packer wrote) at a third of their rate.
MOCAP=$(cd "$(dirname "$0")/../data/mocap" && pwd)
"$GAIT" mocap >"$DIR/mocap.txt"
grep -q "gait cycles from 7 people" "$DIR/mocap.txt" || fail "mocap summary: $(tail -3 "$DIR/mocap.txt")"
"$GAIT" mocap-pack --from "$MOCAP" --out "$DIR/packed" --step 3 >"$DIR/pack.txt"
grep -q "wrote $DIR/packed (37 clips" "$DIR/pack.txt" || fail "mocap-pack: $(cat "$DIR/pack.txt")"
[ -s "$DIR/packed/07/07_01.bvh" ] || fail "mocap-pack wrote no 07/07_01.bvh"
# Its refusals are in bad_input_test.sh (N13, W5, W6).
echo "cli_smoke: ok"
