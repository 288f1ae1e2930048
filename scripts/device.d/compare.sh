# Stage `compare` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT): the headline
# rows of another source tree (a commit before a change) and of this one, built and timed
# in the same call on the same GPU, so that a refactor can show that speed stayed put.
#   git archive BASE | gzip > .carry/base.tgz      (on the developer's machine)
#   RUN_NAME=compare ./run device compare          (with .carry carried)
# Rows, each bench run COMPARE_ROUNDS times (default 2) per tree, in ABBA order:
#   `xstage bench attention` at S = COMPARE_SEQ (default 16384,32768), no baselines;
#   `xstage bench moe --sweep one` at COMPARE_MOE_TOKENS (default 2048,8192), uniform routing;
#   `xstage dit` at P = 1: flux-like 4096 tokens (4 blocks) and wan-like 75,600 (2 blocks).
# COMPARE_ROWS (default "attention dit_flux dit_wan moe") picks the rows.
# Then a table of this tree over the base per row (each side's fastest round) and geomeans
# (scripts/compare_rows.py).
CMP_T0=$(date +%s)
CMP_BUDGET=${COMPARE_BUDGET_S:-540}
cmp_left() { echo $((CMP_BUDGET - ($(date +%s) - CMP_T0))); }
CMP_TGZ=${COMPARE_BASE_TGZ:-$ROOT/.carry/base.tgz}
CMP_SRC=${COMPARE_BASE_DIR:-/tmp/compare-base}
if [ ! -f "$CMP_TGZ" ]; then
  note compare "skipped: no base tree at $CMP_TGZ (git archive BASE | gzip > .carry/base.tgz, carry .carry)"
else
  rm -rf "$CMP_SRC" && mkdir -p "$CMP_SRC" && tar xzf "$CMP_TGZ" -C "$CMP_SRC"
  for side in base new; do
    src=$ROOT; [ "$side" = base ] && src=$CMP_SRC
    step "compare_configure_$side" timeout 120 cmake -S "$src" -B "$ROOT/build-compare-$side" -G Ninja \
      -DCMAKE_BUILD_TYPE=Release -DXSTAGE_CUDA=ON -DXSTAGE_BUILD_GAIT=OFF -DXSTAGE_BUILD_TESTS=OFF
    step "compare_build_$side" timeout 300 cmake --build "$ROOT/build-compare-$side" -j "$(nproc)" --target xstage
  done
  cmp_run() { # name, limit, xstage arguments...: COMPARE_ROUNDS rounds, sides in ABBA order so that
    # drift (clocks, temperature) hits both; JSON into $OUT/compare_<name>_<side>_r<round>.json
    local name=$1 limit=$2; shift 2
    case " ${COMPARE_ROWS:-attention dit_flux dit_wan moe} " in *" $name "*) ;; *) return 0 ;; esac
    for round in $(seq 1 "${COMPARE_ROUNDS:-2}"); do
      local sides="base new"; [ $((round % 2)) = 0 ] && sides="new base"
      for side in $sides; do
        local left=$(cmp_left) lim=$limit
        if [ "$left" -lt 40 ]; then note "compare_${name}_${side}_r$round" "skipped ($left s left)"; continue; fi
        [ "$lim" -gt $((left - 30)) ] && lim=$((left - 30))
        step "compare_${name}_${side}_r$round" timeout "$lim" env XSTAGE_SOURCE_DIR="$ROOT" \
          "$ROOT/build-compare-$side/xstage/cli/xstage" "$@" --json "$OUT/compare_${name}_${side}_r$round.json"
      done
    done
  }
  cmp_run attention 120 bench attention --seq "${COMPARE_SEQ:-16384,32768}" --baselines off --reps 10 --budget-ms 100
  cmp_run dit_flux 60 dit --quiet --preset flux-like --tokens 4096 --steps 2 --blocks 4 --gpus 1
  cmp_run dit_wan 90 dit --quiet --preset wan-like --tokens 75600 --steps 2 --blocks 2 --gpus 1
  cmp_run moe 150 bench moe --sweep one --routing uniform --tokens "${COMPARE_MOE_TOKENS:-2048,8192}" \
    --warmup 1 --iters 5 --budget-s 110
  echo "---- compare: this tree over the base (time ratio new/base; < 1 is faster) ----"
  python3 "$ROOT/scripts/compare_rows.py" "$OUT" | tee "$OUT/compare_table.txt"
  note compare "$(tail -1 "$OUT/compare_table.txt" | cut -c1-150)"
fi
