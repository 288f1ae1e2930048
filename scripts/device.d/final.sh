# Stage `final` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT, $FINAL_OUT; run after
# `build test`, which build into build-device): the MoE bench from router logits with the planner
# timed behind a busy GPU (FINAL_MOE_TOKENS, default 2048,8192) and dit-moe at P = 1 (FINAL_DIT_BLOCKS,
# default 28; two runs), into moe_from_logits.json and dit_moe_one.json.
#   RUN_NAME=final ./run device build test final
FX="${BUILD_DIR:-$ROOT/build-device}/xstage/cli/xstage"
step final_moe_from_logits timeout 240 env XSTAGE_SOURCE_DIR="$ROOT" "$FX" bench moe --sweep one \
  --tokens "${FINAL_MOE_TOKENS:-2048,8192}" --device-routing --warmup 1 --iters 5 --budget-s 200 \
  --json "$OUT/moe_from_logits.json" --png "$OUT/moe_from_logits.png"
for f in moe_from_logits.json moe_from_logits.png; do [ -f "$OUT/$f" ] && cp "$OUT/$f" "$FINAL_OUT/"; done
rm -f "$OUT/dit_moe_one.json"
for i in 1 2; do
  step "final_dit_moe_$i" timeout 120 env XSTAGE_SOURCE_DIR="$ROOT" "$FX" dit --quiet --json "$OUT/dit_moe_one.json" \
    --preset dit-moe --tokens 4096 --steps 2 --blocks "${FINAL_DIT_BLOCKS:-28}" --gpus 1 --samples 7
  grep -h "MoE FFN on the GPU\|^dit-moe" "$OUT/final_dit_moe_$i.log"
done
[ -f "$OUT/dit_moe_one.json" ] && cp "$OUT/dit_moe_one.json" "$FINAL_OUT/"
grep -E "geometric|^ +T " "$OUT/final_moe_from_logits.log" | head -3
