#!/bin/bash
# Issue 14, twenty-fourth pass: the mma GEMVs' four tiles (M = 17..32), MXFP4 and int4, in one
# call. (The run BENCH.md reports applied this pass's uncommitted int4 half as a patch first.)
# 1. GPU tests: the MXFP4 module (four tiles against fp64 at every config, planes and every code
#    at 27 rows, forced through mx_linear with the prologues), the W4A8 bands test, the int4 and
#    int5 mma GEMVs against fp64 (M to 32).
# 2. `bench_mx_decode --mma` at MX_MS (default 16,24,32): MXFP4 / MXFP4-PARO as served against
#    the four tiles, the chunks and the 8-bit route forced; the four tiles alone at MMA_GRID4.
# 3. `bench_decode --h2 mma` at INT4_MS (default 16,24,32): int4 as served, the path before, the
#    four tiles at MMA_GRID[4] (records prologue) and on the blocks prologue, each part alone.
# Usage: bash kernels/device54.sh TEST_LIMIT_S MX_BUDGET_S INT4_BUDGET_S [MX_MS] [INT4_MS]
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=$root/.triton-gpu-cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
if [ "$1" != 0 ]; then
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 timeout "$1" python3 -m pytest --noconftest -q -m gpu \
    -p no:cacheprovider -n 16 -rf --junitxml="$OUT/gputests54.xml" \
    tests/kernels/test_triton_mx_gpu.py "tests/kernels/test_triton_w4a8_gpu.py::test_a16_bands_serve_w4a8" \
    "tests/kernels/test_triton_fast_gpu.py::test_mma_gemv_matches_fp64" \
    "tests/kernels/test_triton_w4a8_gpu.py::test_int5_mma_gemv_matches_fp64" \
    > "$OUT/gputests54.log" 2>&1
  echo "tests rc $?"
  grep -E "passed|failed|FAILED|Error" "$OUT/gputests54.log" | cut -c1-300 | tail -14
fi
cd kernels
if [ "$2" != 0 ]; then
  timeout $(($2 + 60)) python3 -m paro_kernels.bench_mx_decode --mma --out "$OUT/mma4.json" \
    --shapes qkv,gate_up,down,o_proj,in_proj --ms "${4:-16,24,32}" --budget-s "$2" > "$OUT/mma4.log" 2>&1
  echo "mx bench rc $?"
  grep -vE "^(WARNING|  )" "$OUT/mma4.log" | cut -c1-120 | tail -100
fi
if [ "$3" != 0 ]; then
  timeout $(($3 + 60)) python3 -m paro_kernels.bench_decode --h2 mma --out "$OUT/int4mma4.json" \
    --shapes qkv,gate_up,down,o_proj,in_proj --ms "${5:-16,24,32}" --budget-s "$3" > "$OUT/int4.log" 2>&1
  echo "int4 bench rc $?"
  grep -vE "^(WARNING|  |gemv_mma_kernel)" "$OUT/int4.log" | grep -v cublas | cut -c1-120 | tail -80
fi
