# Stage `profile` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT, $FINAL_OUT): where the
# fused MoE kernel's time goes, from its profiled instantiation (FusedMoe::set_profile).
#   RUN_NAME=profile ./run device profile
# 1. own build (build-profile) and the MoE and DiT tests (moe_build_and_test; the MoE tests check
#    that a profiled launch computes the same output bitwise and that its shares are shares);
# 2. `xstage bench moe --profile` (PROFILE_SWEEP, default "one" on one GPU, "standard" otherwise;
#    PROFILE_TOKENS, default 128,512,2048,8192; PROFILE_EP as in the dispatch stage; within
#    PROFILE_LIMIT seconds, default 240) -> moe_profile.json, moe_speedup_profile.png.
PB=${PROFILE_BUILD_DIR:-$ROOT/build-profile}
moe_build_and_test profile "$PB"
PROFILE_LIMIT=${PROFILE_LIMIT:-240}
PSW=${PROFILE_SWEEP:-$([ "${NGPU:-1}" -ge 2 ] && echo standard || echo one)}
[ -z "${PROFILE_EP:-}" ] && [ "${NGPU:-1}" -ge 2 ] && PROFILE_EP=$([ "${NGPU:-1}" -ge 4 ] && echo 4 || echo 2)
step profile_bench timeout "$PROFILE_LIMIT" env XSTAGE_SOURCE_DIR="$ROOT" "$PB/xstage/cli/xstage" bench moe \
  --sweep "$PSW" --tokens "${PROFILE_TOKENS:-128,512,2048,8192}" ${PROFILE_EP:+--ep "$PROFILE_EP"} --profile \
  --warmup 1 --iters 5 --budget-s $((PROFILE_LIMIT - 25)) --json "$OUT/moe_profile.json" --png "$OUT/moe_speedup.png"
for f in moe_profile.json moe_speedup_profile.png; do [ -f "$OUT/$f" ] && cp "$OUT/$f" "$FINAL_OUT/"; done
if [ -f "$OUT/moe_profile.json" ]; then
  echo "---- bench moe --profile: mean share of a consumer warpgroup's time (Interleaved), per tokens per rank ----"
  python3 - "$OUT/moe_profile.json" <<'PY'
import json, sys, collections
rows = json.load(open(sys.argv[1]))["rows"]
keys = ["start", "item_wait", "mainloop", "stage_wait_in_mainloop", "epilogue", "combine_wait", "combine"]
by = collections.defaultdict(list)
for r in rows:
    by[r["tokens_per_rank"]].append(r["interleaved_profile"]["consumer_share"])
print("tokens " + " ".join(f"{k[:10]:>10}" for k in keys))
for t, v in sorted(by.items()):
    print(f"{t:6d} " + " ".join(f"{sum(x[k] for x in v) / len(v):10.3f}" for k in keys))
PY
  grep -E "geometric|budget" "$OUT/profile_bench.log"
fi
