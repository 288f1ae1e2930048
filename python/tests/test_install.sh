#!/bin/sh
# Installs a build into a temporary prefix and uses the installed Python package from
# outside the source tree: the library is found through the package, the shipped
# Burst-Gap fits through its data/ folder, and one call of each kind of operator runs
# (the gait part's too where the library has it).
#   test_install.sh <cmake> <build dir> <python dir relative to the prefix> <python3>
set -eu
CMAKE=$1 BUILD=$2 PYDIR=$3 PY=$4
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$CMAKE" --install "$BUILD" --prefix "$TMP/prefix" >/dev/null
cd "$TMP"
env -u XSTAGE_SOURCE_DIR -u XSTAGE_TORCH_LIB PYTHONPATH="$TMP/prefix/$PYDIR" "$PY" - "$TMP/prefix" <<'PYEOF'
import sys
import torch
import xstage
assert xstage.library_path.startswith(sys.argv[1]), f"loaded {xstage.library_path}, not the installed library"
q = torch.randn(1, 16, 2, 64).to(torch.bfloat16)
assert xstage.attention(q, q, q).shape == q.shape
p = xstage.burstgap_predict(132, 16384, 1000.0)
assert p["params"]["pattern"] == "peer" and p["steady_issue_ns"] > 0
if xstage.build_info()["gait"]:  # the gait part: its operators come with the same library
    import xstage.gait
    ids = ["002-nm-01-000", "002-nm-05-090", "002-nm-01-090", "002-nm-05-000"]
    assert xstage.gait.rank1(torch.eye(4).reshape(4, 4, 1), ids, 1)["NM"]["probes"] == 2
print("installed package ok:", xstage.library_path, xstage.advise(65536, 132, 500.0)["remedy"])
PYEOF
