#!/bin/sh
# Installs a build of this repository (with LibTorch) into a temporary prefix, builds
# this example against it as a downstream project would, runs it on the tiny CPU config.
#   test_install.sh <cmake> <build dir> <source dir> [C++ compiler]
. "$3/examples/install_common.sh"
[ -f "$TMP/prefix/include/gait/nets/gait_net.hpp" ] || fail "gait headers not installed"
# shellcheck disable=SC2086
"$CMAKE" -S "$SRC/examples/cpp_gait" -B "$TMP/build" $GEN -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$CXX_COMPILER" -DCMAKE_PREFIX_PATH="$TMP/prefix" >"$TMP/configure.log" 2>&1 ||
  fail "configure: $(tail -5 "$TMP/configure.log")"
"$CMAKE" --build "$TMP/build" >"$TMP/build.log" 2>&1 || fail "build: $(tail -5 "$TMP/build.log")"

OUT=$("$TMP/build/cpp_gait" "$SRC/gait/configs/tiny-cpu.json")
echo "$OUT"
echo "$OUT" | grep -q "^embedding \[2, [0-9]*, [0-9]*\], [0-9]* parameters" || fail "no embedding line"

set +e
"$TMP/build/cpp_gait" "$TMP/missing.json" >"$TMP/out" 2>"$TMP/err"; RC=$?
set -e
[ "$RC" = 1 ] && [ "$(wc -l <"$TMP/err")" = 1 ] || fail "bad config: exit $RC, stderr: $(cat "$TMP/err")"
echo "ok"
