#!/bin/sh
# Installs a build of this repository into a temporary prefix, builds this example
# against it as a downstream project would, and checks what it prints.
#   test_install.sh <cmake> <build dir> <source dir> [C++ compiler]
. "$3/examples/install_common.sh"
# Installed text files must not point into the source or build tree (the compiled-in
# default params path inside libxs_burstgap.a is a known exception; grep -I skips it).
if grep -rIl -e "$SRC" -e "$BUILD" "$TMP/prefix"; then fail "build-tree paths in installed files (above)"; fi

# shellcheck disable=SC2086
"$CMAKE" -S "$SRC/examples/cpp_advisor" -B "$TMP/build" $GEN -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$CXX_COMPILER" -DCMAKE_PREFIX_PATH="$TMP/prefix" >/dev/null
"$CMAKE" --build "$TMP/build" >/dev/null

OUT=$("$TMP/build/cpp_advisor" "$SRC/xstage/data/h200_params.json")
echo "$OUT"
echo "$OUT" | grep -q "^prediction: free issue [0-9]* ns, steady issue [0-9]* ns" || fail "no prediction line"
echo "$OUT" | grep -q "^advice: [a-z_]* (stall " || fail "no advice line"

# Bad input: exit 1 and exactly one line on stderr.
set +e
"$TMP/build/cpp_advisor" "$TMP/missing.json" >"$TMP/out" 2>"$TMP/err"; RC=$?
set -e
[ "$RC" = 1 ] || fail "bad path: exit $RC, want 1"
[ "$(wc -l <"$TMP/err")" = 1 ] && [ ! -s "$TMP/out" ] || fail "bad path: want one line on stderr, got: $(cat "$TMP/err")"

# A missing component fails find_package with our message.
mkdir -p "$TMP/nocomp"
printf 'cmake_minimum_required(VERSION 3.25)\nproject(t LANGUAGES CXX)\nfind_package(xstage REQUIRED COMPONENTS burstgap no_such_part)\n' >"$TMP/nocomp/CMakeLists.txt"
if "$CMAKE" -S "$TMP/nocomp" -B "$TMP/nocomp/b" -DCMAKE_PREFIX_PATH="$TMP/prefix" >"$TMP/nocomp.log" 2>&1; then
  fail "find_package accepted a missing component"
fi
grep -q "no component 'no_such_part'" "$TMP/nocomp.log" || fail "missing component: unclear message: $(cat "$TMP/nocomp.log")"
echo "OK"
