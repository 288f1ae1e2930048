#!/usr/bin/env bash
# Open-ended fuzzing with libFuzzer (clang, ASan + UBSan), beyond the bounded replay CTest
# runs. Builds build-fuzz/ (LibTorch off: its 1.13 headers do not build with clang 14, so
# the .gckpt target runs in fuzz_replay only), then runs every target for SECONDS.
# Usage: fuzz/run_libfuzzer.sh [SECONDS per target, default 60] [TARGET...]
# Findings land in build-fuzz/fuzz/findings/<target>/ (crash-*, leak-*, oom-*, timeout-*);
# the grown corpus in build-fuzz/fuzz/corpus/<target>/ (not committed: fuzz/corpus/ holds
# the seeds). Reproduce one with: XS_FUZZ_TARGET=<target> build-fuzz/fuzz/xs_fuzz FILE
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
shift || true
B=build-fuzz
if [ ! -f "$B/CMakeCache.txt" ]; then
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXSTAGE_CUDA=OFF -DGAIT_TORCH=OFF \
    -DCMAKE_CXX_COMPILER=clang++ -DXSTAGE_FUZZ=ON -DXSTAGE_BUILD_TESTS=OFF \
    -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined"
fi
cmake --build "$B" --target xs_fuzz
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(png pose_csv sweep_csv params_json config_json gseq npy safetensors bvh asf_amc)
for t in "${TARGETS[@]}"; do
  corpus="$B/fuzz/corpus/$t" findings="$B/fuzz/findings/$t"
  mkdir -p "$corpus" "$findings"
  cp -n fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  echo "== $t (${SECONDS_PER_TARGET} s)"
  XS_FUZZ_TARGET=$t "$B/fuzz/xs_fuzz" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$findings/" -print_final_stats=1 "$corpus" 2>&1 | grep -E "^(#[0-9]+ +DONE|stat::|==|SUMMARY|ERROR)" || true
done
