# Stage `wgmma` of scripts/device.sh (sourced: uses step/note, $OUT, $ROOT, $FINAL_OUT): the MoE and
# fused QKV GEMMs with one m64n256k16 per k16 step (default) against two m64n128k16
# (-DXSTAGE_WGMMA_N128_PAIRS, the kernels until session 11).
#   RUN_NAME=wgmma ./run device wgmma
# 1. two builds (build-wgmma-n256, build-wgmma-n128), each with the MoE and DiT tests
#    (moe_build_and_test, -Xptxas -v); the Ulysses GPU tests (the fused QKV kernel) of both;
# 2. in turns, WGMMA_ROUNDS times (default 1): `xstage bench moe --sweep one` on WGMMA_TOKENS
#    (default 2048,8192) and WGMMA_ROUTING (default uniform), and `xstage bench qkv --groups 0`,
#    of each build -> moe_wgmma_<build>_<round>.json, qkv_wgmma_<build>_<round>.json;
# 3. the ratios n128 / n256 per row and their geometric means.
WB=$ROOT/build-wgmma
for v in n256 n128; do
  flags="-Xptxas -v"
  [ "$v" = n128 ] && flags="$flags -DXSTAGE_WGMMA_N128_PAIRS"
  moe_build_and_test "wgmma_$v" "$WB-$v" -DCMAKE_CUDA_FLAGS="$flags"
  grep -h -A3 -E "Compiling entry.*(moe_fused_kernel|qkv_fused_kernel)" "$OUT/wgmma_${v}_build.log" | grep -E "registers|spill" | sort | uniq -c
  step "wgmma_${v}_build_ulysses" timeout 200 cmake --build "$WB-$v" -j "$(nproc)" --target xstage_ulysses_gpu_tests
  step "wgmma_${v}_ulysses_gpu_tests" timeout 200 env XSTAGE_SOURCE_DIR="$ROOT" "$WB-$v/xstage/tests/xstage_ulysses_gpu_tests"
  grep -E "^\[  (FAILED|PASSED|SKIPPED) " "$OUT/wgmma_${v}_ulysses_gpu_tests.log" 2>/dev/null | head -4
done
for round in $(seq 1 "${WGMMA_ROUNDS:-1}"); do
  for v in n256 n128; do
    step "wgmma_${v}_moe_$round" timeout 200 env XSTAGE_SOURCE_DIR="$ROOT" "$WB-$v/xstage/cli/xstage" bench moe \
      --sweep one --tokens "${WGMMA_TOKENS:-2048,8192}" --routing "${WGMMA_ROUTING:-uniform}" --warmup 1 --iters 5 \
      --budget-s 170 --json "$OUT/moe_wgmma_${v}_$round.json" --png ""
    step "wgmma_${v}_qkv_$round" timeout 120 env XSTAGE_SOURCE_DIR="$ROOT" "$WB-$v/xstage/cli/xstage" bench qkv \
      --groups 0 --json "$OUT/qkv_wgmma_${v}_$round.json"
  done
done
python3 - "$OUT" "$FINAL_OUT/wgmma_ab.json" <<'PY'
import glob, json, math, os, sys
out, dst = sys.argv[1], sys.argv[2]
def gm(v):
    return math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
res = {"command": "RUN_NAME=wgmma ./run device wgmma (scripts/device.d/wgmma.sh)", "moe": [], "qkv": []}
for f in sorted(glob.glob(os.path.join(out, "moe_wgmma_n256_*.json"))):
    g = f.replace("n256", "n128")
    if not os.path.exists(g):
        continue
    a, b = json.load(open(f)), json.load(open(g))
    res.update(card=a["card"], gpus=a["gpus"], date=a["date"])
    for x, y in zip(a["rows"], b["rows"]):
        res["moe"].append({k: x[k] for k in ("tokens_per_rank", "experts", "topk", "hidden", "intermediate", "routing")} |
                          {"round": f.rsplit("_", 1)[1].split(".")[0],
                           "n256": {"interleaved_us": x["interleaved_us"], "expert_wave_us": x["expert_wave_us"],
                                    "tflops": x["tflops"], "correct": x["correct"], "gemm_tflops": x["gemm_tflops"]},
                           "n128": {"interleaved_us": y["interleaved_us"], "expert_wave_us": y["expert_wave_us"],
                                    "tflops": y["tflops"], "correct": y["correct"], "gemm_tflops": y["gemm_tflops"]},
                           "n128_over_n256": y["interleaved_us"] / x["interleaved_us"]})
for f in sorted(glob.glob(os.path.join(out, "qkv_wgmma_n256_*.json"))):
    g = f.replace("n256", "n128")
    if not os.path.exists(g):
        continue
    a, b = json.load(open(f)), json.load(open(g))
    for x, y in zip(a["rows"], b["rows"]):
        res["qkv"].append({k: x[k] for k in ("S", "P", "H")} |
                          {"n256_ms": x["fused_loopback_ms"], "n128_ms": y["fused_loopback_ms"],
                           "cublas_ms": x["cublas_norm_rope_ms"], "counts_ok": x["signal_counts_ok"] and y["signal_counts_ok"],
                           "n128_over_n256": y["fused_loopback_ms"] / x["fused_loopback_ms"]})
for kind in ("moe", "qkv"):
    r = [x["n128_over_n256"] for x in res[kind]]
    res[f"{kind}_geomean_n128_over_n256"] = gm(r)
    if kind == "moe":
        for t in sorted({x["tokens_per_rank"] for x in res[kind]}):
            res[f"moe_geomean_n128_over_n256_{t}"] = gm([x["n128_over_n256"] for x in res[kind] if x["tokens_per_rank"] == t])
tmp = dst + ".tmp"
json.dump(res, open(tmp, "w"), indent=2)
os.replace(tmp, dst)
print(f"{'T':>5} {'E':>4} {'k':>2} {'hid':>5} {'I':>5} | {'n256 us':>9} {'n128 us':>9} {'n128/n256':>9} | {'TF n256':>7} {'TF cuBLAS':>9}")
for x in res["moe"]:
    print(f"{x['tokens_per_rank']:5d} {x['experts']:4d} {x['topk']:2d} {x['hidden']:5d} {x['intermediate']:5d} | "
          f"{x['n256']['interleaved_us']:9.1f} {x['n128']['interleaved_us']:9.1f} {x['n128_over_n256']:9.3f} | "
          f"{x['n256']['tflops']:7.1f} {x['n256']['gemm_tflops']:9.1f} {'' if x['n256']['correct'] and x['n128']['correct'] else 'WRONG'}")
for x in res["qkv"]:
    print(f"qkv S {x['S']:6d} P {x['P']} H {x['H']:2d} | {x['n256_ms']:.4f} {x['n128_ms']:.4f} {x['n128_over_n256']:.3f} | cuBLAS {x['cublas_ms']:.4f} {'' if x['counts_ok'] else 'COUNTS WRONG'}")
print({k: round(v, 4) for k, v in res.items() if "geomean" in k})
PY
