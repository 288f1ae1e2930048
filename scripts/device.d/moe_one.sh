# Stage `moe_one` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT): the fused MoE
# kernel at EP = 1 against cuBLAS on one GPU, and where its time goes, within MOE_ONE_BUDGET_S
# seconds (default 560; each step's limit is cut to what is left, a step with under 20 s
# left is skipped with a note, so the archive is always made).
#   RUN_NAME=moe1 ./run device moe_one
# 1. own build (MOE_ONE_BUILD_DIR, default build-moe-one): the xstage CLI and the MoE GPU tests;
# 2. the MoE GPU tests (MOE_ONE_TESTS=0 skips): EP = 1, the P = 2, 4, 8 one-GPU stand-ins,
#    the host-link windows, the absent peer;
# 3. `xstage bench moe --sweep one --routing MOE_ONE_ROUTING (default uniform,balanced: the
#    issue's routing, and every expert at the mean count as cuBLAS bmm has it) --tokens
#    MOE_ONE_TOKENS (default 512,2048,8192) --profile` into a copy of docs/results/moe.json ($OUT/moe.json: its
#    multi-GPU rows and head stay, the EP = 1 rows and one_gpu_* keys are this run's; copy it
#    back from the archive): fused, the unfused path and the cuBLAS expert GEMMs per row, and
#    their heatmap (moe-one-cublas.png, where PLplot is installed: docs/img);
# 4. Nsight Compute on the fused kernel of MOE_ONE_NCU_ROWS (sweep-one row indices, default
#    "38 36": E 128, k 6, hidden 4096, I 2048 at 8192 and 2048 tokens), clocks not locked
#    (--clock-control none: the power cap is part of what is measured) -> ncu_ROW.csv;
# 5. the table: per token count the fused / cuBLAS geomean, fused / unfused, the ncu summary.
MO_T0=$(date +%s)
MO_BUDGET=${MOE_ONE_BUDGET_S:-560}
mo_step() { step_within "$MO_T0" "$MO_BUDGET" "$@"; }  # name, wanted seconds, command...
MB=${MOE_ONE_BUILD_DIR:-$ROOT/build-moe-one}
MX="$MB/xstage/cli/xstage"

mo_step moe_one_configure 120 cmake -S "$ROOT" -B "$MB" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_CUDA=ON \
  -DXSTAGE_BUILD_GAIT=OFF
mo_step moe_one_build 400 cmake --build "$MB" -j "$(nproc)" --target xstage xstage_moe_gpu_tests
[ "${MOE_ONE_TESTS:-1}" = 1 ] && mo_step moe_one_tests 150 "$MB/xstage/tests/xstage_moe_gpu_tests"
cp "$ROOT/docs/results/moe.json" "$OUT/moe.json"
mo_step moe_one_bench "${MOE_ONE_BENCH_S:-330}" env XSTAGE_SOURCE_DIR="$ROOT" "$MX" bench moe --sweep one \
  --routing "${MOE_ONE_ROUTING:-uniform,balanced}" --tokens "${MOE_ONE_TOKENS:-512,2048,8192}" --warmup 2 --iters 10 --profile \
  --budget-s "$(( ${MOE_ONE_BENCH_S:-330} - 40 ))" --json "$OUT/moe.json" $(png_arg "$OUT/moe-one-cublas.png")

NCU_METRICS=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__cycles_elapsed.avg.per_second,\
dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,\
lts__t_sector_hit_rate.pct,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,\
l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum,\
l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum,launch__registers_per_thread,gpu__time_duration.sum
for row in ${MOE_ONE_NCU_ROWS:-38 36}; do
  mo_step "moe_one_ncu_$row" 120 ncu --clock-control none --kernel-name regex:moe_fused_kernel --launch-skip 2 \
    --launch-count 1 --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --metrics "$NCU_METRICS" -f -o "$OUT/ncu_$row" \
    "$MX" bench moe --sweep one --only "$row" --warmup 1 --iters 1 --json ""
  [ -f "$OUT/ncu_$row.ncu-rep" ] && ncu --import "$OUT/ncu_$row.ncu-rep" --page details --csv >"$OUT/ncu_$row.csv" 2>&1
done

{
  echo "---- bench moe --sweep one ----"
  grep -E "^ *[0-9]+ .* (uniform|balanced)|fused / |geometric|order simulation" "$OUT/moe_one_bench.log" | tail -80
  for row in ${MOE_ONE_NCU_ROWS:-38 36}; do
    [ -f "$OUT/ncu_$row.csv" ] || continue
    echo "---- ncu, sweep-one row $row ----"
    grep -E "$(echo "$NCU_METRICS" | tr ',' '|')|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occ|Warp Cycles Per Issued|No Eligible" \
      "$OUT/ncu_$row.csv" | awk -F'","' '{printf "  %-70s %s %s\n", $(NF-2), $(NF-1), $NF}' | tr -d '"' | head -24
  done
} >"$OUT/moe_one_table.txt"
cat "$OUT/moe_one_table.txt"
note moe_one "$(grep -cE "^ *[0-9]+ .* (uniform|balanced)" "$OUT/moe_one_bench.log" 2>/dev/null) rows; $(grep -h "fused / cuBLAS" "$OUT/moe_one_bench.log" 2>/dev/null | sed 's/.*tokens: geomean/ /' | tr '\n' ';')"
