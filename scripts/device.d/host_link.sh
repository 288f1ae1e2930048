# Stage `host_link` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT): the X-Stage
# of one GPU's host link (stores into mapped pinned host memory), within HOST_BUDGET_S
# seconds (default 540).
#   RUN_NAME=host ./run device host_link
# 1. build the xstage CLI ($BUILD, shared with the build stage when that ran first);
# 2. `xstage probe --pattern host --sweep standard` on GPU 0 -> $OUT/probe_host (HOST_PROBE=0 skips
#    it and 3: the probe part of docs/results/host_link.json is kept)
#    (every store kind, visible mode, the copy engine's device-to-host rate);
# 3. `xstage fit --holdout 0.3` on it: params.json and report.json (held-out error,
#    smallest backpressure-free gap error); the benches below predict with this fit
#    (ship it as xstage/data/h200_host_params.json with the results);
# 4. the host-link GPU test of Ulysses (bitwise against HBM);
# 5. HOST_ULYSSES=0 skips: `xstage bench ulysses --link host` (P = HOST_RANKS, default 2,4,8; S = 4K .. HOST_MAX_SEQ,
#    default 65536) -> $OUT/ulysses_host.json;
# 5a. HOST_QKV=0 skips: `xstage bench qkv --link host` (S = 4096, 16384, 75776; P = HOST_RANKS; H = 24, 40)
#    -> $OUT/qkv_host.json (the fused QKV projection's stores to the other owners over the host link; it
#    orders its tiles with the shipped NVLink fits and predicts with the shipped host fit);
# 5b. HOST_MOE=0 skips: `xstage bench moe --link host` per sweep of HOST_MOE_SWEEP (comma-separated, default
#    standard; e.g. standard,eight for P = 2, 4 and 8; HOST_MOE_TOKENS, default 128,512,2048; HOST_MOE_ROUTING,
#    default uniform,skewed;
#    HOST_MOE_BUDGET_S per sweep, default 150) -> $OUT/moe_host_SWEEP.json, joined into one section;
# 6. `xstage host-link-results` -> $OUT/host_link.json: a copy of docs/results/host_link.json with
#    the parts this call measured replaced,
#    copied over docs/results/host_link.json by the developer from the archive (the plots
#    are drawn there: `--png-dir docs/img`, with PLplot);
# 7. compute-sanitizer memcheck on the host-link GPU tests, Ulysses', the probe's and the MoE's (SM stores
#    and the combine drain) (HOST_SANITIZE=0 skips).
HOST_T0=$(date +%s)
HOST_BUDGET=${HOST_BUDGET_S:-540}
host_step() { step_within "$HOST_T0" "$HOST_BUDGET" "$@"; }  # name, wanted seconds, command...
HT="$BUILD/xstage/tests"
if [ ! -x "$XS" ] || [ ! -x "$HT/xstage_ulysses_gpu_tests" ] || [ ! -x "$HT/xstage_moe_gpu_tests" ]; then
  host_step host_configure 120 cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_CUDA=ON \
    -DXSTAGE_BUILD_GAIT=OFF
  host_step host_build 300 cmake --build "$BUILD" -j "$(nproc)" --target xstage xstage_ulysses_gpu_tests \
    xstage_probe_gpu_tests xstage_moe_gpu_tests
fi
HP="$OUT/probe_host"
rm -rf "$HP"
if [ "${HOST_PROBE:-1}" = 1 ] &&
  host_step host_probe 240 "$XS" probe --gpus 1 --sweep "${SWEEP:-standard}" --pattern host --out "$HP" --quiet; then
  host_step host_fit 120 "$XS" fit "$HP/sweep.csv" -o "$HP/params.json" --holdout 0.3 --report "$HP/report.json"
fi
HOST_PARAMS=(); [ -f "$HP/params.json" ] && HOST_PARAMS=(--params "$HP/params.json")
host_step host_gpu_tests 120 "$HT/xstage_ulysses_gpu_tests" --gtest_filter='UlyssesHostLink.*'
host_step host_moe_tests 180 "$HT/xstage_moe_gpu_tests" \
  --gtest_filter='MoeFusedGpu.HostLinkWindows*:MoeFusedGpu.AbsentPeer*'
[ "${HOST_ULYSSES:-1}" = 1 ] && host_step host_ulysses 300 "$XS" bench ulysses --link host \
  --ranks "${HOST_RANKS:-2,4,8}" --max-seq "${HOST_MAX_SEQ:-65536}" "${HOST_PARAMS[@]}" --json "$OUT/ulysses_host.json"
[ "${HOST_QKV:-1}" = 1 ] && host_step host_qkv 150 "$XS" bench qkv --link host --seq 4096,16384,75776 \
  --ranks "${HOST_RANKS:-2,4,8}" --heads 24,40 --json "$OUT/qkv_host.json"  # the shipped fits (NVLink order + host)
HOST_MOE_SWEEPS=()
[ "${HOST_MOE:-1}" = 1 ] && IFS=, read -ra HOST_MOE_SWEEPS <<<"${HOST_MOE_SWEEP:-standard}"
for sw in "${HOST_MOE_SWEEPS[@]}"; do
  host_step "host_moe_$sw" $(( ${HOST_MOE_BUDGET_S:-150} + 60 )) "$XS" bench moe --link host --sweep "$sw" \
    --tokens "${HOST_MOE_TOKENS:-128,512,2048}" --routing "${HOST_MOE_ROUTING:-uniform,skewed}" --warmup 1 --iters 5 \
    --budget-s "${HOST_MOE_BUDGET_S:-150}" \
    "${HOST_PARAMS[@]}" --json "$OUT/moe_host_$sw.json"
done
# What this call measured replaces its part of docs/results/host_link.json; the rest is kept.
U_ARG=(); [ -f "$OUT/ulysses_host.json" ] && U_ARG=(--ulysses "$OUT/ulysses_host.json")
for sw in "${HOST_MOE_SWEEPS[@]}"; do [ -f "$OUT/moe_host_$sw.json" ] && U_ARG+=(--moe "$OUT/moe_host_$sw.json"); done
[ -f "$HP/report.json" ] && U_ARG+=(--probe "$HP")
cp "$ROOT/docs/results/host_link.json" "$OUT/host_link.json" 2>/dev/null
if [ ${#U_ARG[@]} -gt 0 ]; then
  host_step host_results 30 "$XS" host-link-results "${U_ARG[@]}" -o "$OUT/host_link.json"
  for log in host_fit:3 host_ulysses:4; do  # the parts this call ran
    if [ -f "$OUT/${log%:*}.log" ]; then tail -"${log#*:}" "$OUT/${log%:*}.log"; fi
  done
  for sw in "${HOST_MOE_SWEEPS[@]}"; do tail -3 "$OUT/host_moe_$sw.log"; done
  cat "$OUT/host_results.log"
fi
if [ "${HOST_SANITIZE:-1}" = 1 ]; then
  host_step host_memcheck 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
    "$HT/xstage_ulysses_gpu_tests" --gtest_filter='UlyssesHostLink.*'
  host_step host_memcheck_probe 90 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
    "$HT/xstage_probe_gpu_tests" --gtest_filter='ProbeGpu.EveryStoreKind*'
  host_step host_memcheck_moe 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
    "$HT/xstage_moe_gpu_tests" --gtest_filter='MoeFusedGpu.HostLinkWindows*'
fi
