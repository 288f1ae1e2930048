# Stage `agent` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT, $FINAL_OUT): the
# Ulysses kernel's signal by the agent lane (FusedSignal::by_agent) beside per_cta and per_slice.
#   RUN_NAME=agent ./run device agent
# 1. own build (build-agent, -Xptxas -v) and the MoE and DiT tests (moe_build_and_test);
# 2. the attention and Ulysses GPU tests (the attention kernel's barrier area grew by the
#    agent's counters), and the ptxas spill lines of every flash_fwd_kernel;
# 3. `xstage bench ulysses --kernel-only` (AGENT_RANKS, default 2,4; AGENT_MAX_SEQ, default
#    65536): attention alone, in the fused order, and the remote-store kernel with every target
#    local for each signal mode, with the signal counts checked -> ulysses_kernel.json;
# 4. `xstage bench qkv --groups 0` (AGENT_QKV=0 skips): the fused QKV kernel with every owner local,
#    released by the agent lane and by the consumers, against cuBLAS + qk_norm_rope -> qkv_kernel.json.
AB=${AGENT_BUILD_DIR:-$ROOT/build-agent}
moe_build_and_test agent "$AB" -DCMAKE_CUDA_FLAGS="-Xptxas -v"
step agent_build_more timeout 300 cmake --build "$AB" -j "$(nproc)" --target xstage_attention_gpu_tests \
  xstage_attention_hopper_gpu_tests xstage_ulysses_gpu_tests xstage_ulysses_tests
grep -h -A2 "flash_fwd_kernel" "$OUT/agent_build.log" "$OUT/agent_build_more.log" | grep -E "spill" | sort | uniq -c
step agent_ulysses_cpu_tests timeout 60 "$AB/xstage/tests/xstage_ulysses_tests"
for t in attention_gpu attention_hopper_gpu ulysses_gpu; do
  step "agent_${t}_tests" timeout 300 env XSTAGE_SOURCE_DIR="$ROOT" "$AB/xstage/tests/xstage_${t}_tests"
  grep -E "^\[  (FAILED|PASSED|SKIPPED) " "$OUT/agent_${t}_tests.log" 2>/dev/null | head -8
done
step agent_ulysses_kernel timeout 240 env XSTAGE_SOURCE_DIR="$ROOT" "$AB/xstage/cli/xstage" bench ulysses \
  --kernel-only --ranks "${AGENT_RANKS:-2,4}" --max-seq "${AGENT_MAX_SEQ:-65536}" --samples 5 \
  --json "$OUT/ulysses_kernel.json"
[ -f "$OUT/ulysses_kernel.json" ] && cp "$OUT/ulysses_kernel.json" "$FINAL_OUT/"
if [ "${AGENT_QKV:-1}" != 0 ]; then
  step agent_qkv_kernel timeout 200 env XSTAGE_SOURCE_DIR="$ROOT" "$AB/xstage/cli/xstage" bench qkv --groups 0 \
    --json "$OUT/qkv_kernel.json"
  [ -f "$OUT/qkv_kernel.json" ] && cp "$OUT/qkv_kernel.json" "$FINAL_OUT/"
fi
if [ -f "$OUT/agent_ulysses_kernel.log" ]; then
  echo "---- bench ulysses --kernel-only (ratios to attention alone; loop-ag = the agent's signal) ----"
  grep -E "^ +S |^ +[0-9]+ +[0-9] " "$OUT/agent_ulysses_kernel.log" | cut -c1-150
fi
if [ -f "$OUT/agent_qkv_kernel.log" ]; then
  echo "---- bench qkv (ms; consumer = the fused kernel released by its consumers) ----"
  grep -E "^ +S |^ +[0-9]+ +[0-9] " "$OUT/agent_qkv_kernel.log" | cut -c1-150
fi
