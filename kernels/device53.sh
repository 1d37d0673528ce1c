#!/bin/bash
# Issue 14, twenty-fourth pass: the MXFP4 mma GEMV's four tiles (M = 17..32) and what the
# twenty-third pass built without a device, in one call.
# 1. The GPU tests: the MXFP4 module (the four tiles against fp64 at every config, the planes and
#    every code at 27 rows, forced through mx_linear with the prologues; the decode chunks as
#    served) and the W4A8 bands test (M = 200: fp8 on the 8-bit route).
# 2. `bench_mx_decode --mma` at MS (default 16,17,24,32) on every 27B shape: MXFP4 / MXFP4-PARO as
#    served (the chunks past 16) against the four tiles, the chunks and the 8-bit route forced,
#    int4 as served and cuBLAS; the four tiles alone at MMA_GRID4's configs (their output against
#    fp64). Set MMA_MAX_M / MMA_CHUNK_MAX_M by it.
# 3. The mid band's launch configs (`device51.sh`).
# Usage: bash kernels/device53.sh TEST_LIMIT_S MMA_BUDGET_S SWEEP_BUDGET_S [MS]  (0 skips a step)
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=$root/.triton-gpu-cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
if [ "$1" != 0 ]; then
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 timeout "$1" python3 -m pytest --noconftest -q -m gpu \
    -p no:cacheprovider -n 16 -rf --junitxml="$OUT/gputests53.xml" \
    tests/kernels/test_triton_mx_gpu.py "tests/kernels/test_triton_w4a8_gpu.py::test_a16_bands_serve_w4a8" \
    > "$OUT/gputests53.log" 2>&1
  echo "tests rc $?"
  grep -E "passed|failed|FAILED|Error" "$OUT/gputests53.log" | tail -12
fi
if [ "$2" != 0 ]; then
  (cd kernels && timeout $(($2 + 120)) python3 -m paro_kernels.bench_mx_decode --mma \
    --out "$OUT/mma4.json" --shapes qkv,gate_up,down,o_proj,in_proj --ms "${4:-16,17,24,32}" \
    --budget-s "$2" > "$OUT/mma4.log" 2>&1)
  echo "bench rc $?"
  grep -vE "^(WARNING|  )" "$OUT/mma4.log" | cut -c1-150 | tail -120
fi
[ "$3" != 0 ] && bash kernels/device51.sh "$3"
