# Sourced by the examples' install tests, with their arguments still in $1..$4: names
# them, installs the build into a temporary prefix (removed on exit), defines fail().
#   <cmake> <build dir> <source dir> [C++ compiler]
set -eu
CMAKE=$1 BUILD=$2 SRC=$3 CXX_COMPILER=${4:-c++}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
"$CMAKE" --install "$BUILD" --prefix "$TMP/prefix" >/dev/null
GEN=; command -v ninja >/dev/null && GEN="-G Ninja"
