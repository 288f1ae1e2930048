# Stage `counts` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT, $FINAL_OUT): the release
# agents' completion counters under repetition, and the registers of the code that runs after a
# warpgroup's setmaxnreg.dec.
#   RUN_NAME=counts ./run device counts
# 1. own build of the xstage CLI (COUNTS_BUILD_DIR, default build-counts);
# 2. SASS of the fused QKV and MoE kernels (cuobjdump): the highest register each names, and the
#    release agents' loops (around NANOSLEEP / the suspending try_wait) -> counts_sass_*.txt;
# 3. `xstage bench qkv --count-checks COUNTS_CHECKS` (default 20) on COUNTS_SEQ (default 75776),
#    P 2 and 4, H 24 and 40: every launch's counters against the expected counts, per release mode.
CTB=${COUNTS_BUILD_DIR:-$ROOT/build-counts}
step counts_configure timeout 90 cmake -S "$ROOT" -B "$CTB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_CUDA=ON \
  -DXSTAGE_BUILD_GAIT=OFF
step counts_build timeout 300 cmake --build "$CTB" -j "$(nproc)" --target xstage
for k in qkv_fused_kernel:ulysses/libxs_ulysses.a moe_fused_kernel:moe/libxs_moe.a; do
  fn=${k%%:*}; lib=$CTB/xstage/${k#*:}
  cuobjdump -sass "$lib" 2>/dev/null | awk -v f="$fn" '/Function : /{p = index($0, f) > 0} p' >"$OUT/counts_sass_$fn.txt"
  echo "---- $fn: $(grep -c . "$OUT/counts_sass_$fn.txt") SASS lines; highest register $(grep -o 'R[0-9]\+' \
    "$OUT/counts_sass_$fn.txt" | tr -d R | sort -n | tail -1); setmaxnreg: $(grep -c USETMAXREG "$OUT/counts_sass_$fn.txt")"
done
step counts_qkv timeout 240 env XSTAGE_SOURCE_DIR="$ROOT" "$CTB/xstage/cli/xstage" bench qkv --groups 0 \
  --seq "${COUNTS_SEQ:-75776}" --ranks 2,4 --heads 24,40 --count-checks "${COUNTS_CHECKS:-20}" --samples 3 \
  --json "$OUT/qkv_counts.json"
grep -E "^ +[0-9]+ +[0-9] |miscounted" "$OUT/counts_qkv.log" | cut -c1-400
