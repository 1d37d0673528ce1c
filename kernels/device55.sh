#!/bin/bash
# Issue 14, twenty-fourth pass, the final tree in one call: the whole GPU suite (`gpushard.sh 1 1
# LIMIT`), then the MXFP4 decode chunks of 32 rows timed as served at M = 33..64 (`bench_mx_decode
# --mma` at MX_MS: as served = the chunks, the 8-bit route and the GEMM forced), then int5 on the
# four tiles (`bench_decode --h2 mma5` at 24, 32: int5 as served, the four tiles at MMA5_GRID[4]).
# Usage: bash kernels/device55.sh LIMIT_S MX_BUDGET_S INT5_BUDGET_S [MX_MS]   (0 skips a step)
[ "$1" != 0 ] && bash kernels/gpushard.sh 1 1 "$1"
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=$root/.triton-gpu-cache
cd kernels
if [ "$2" != 0 ]; then
  timeout $(($2 + 60)) python3 -m paro_kernels.bench_mx_decode --mma --out "$OUT/mx-chunks.json" \
    --shapes qkv,gate_up,down,o_proj,in_proj --ms "${4:-40,48,64}" --budget-s "$2" > "$OUT/mx.log" 2>&1
  echo "mx bench rc $?"
  grep -E "served|chunks|w8|gemm|cublas" "$OUT/mx.log" | grep -v "^  " | cut -c1-90 | tail -90
fi
if [ "$3" != 0 ]; then
  timeout $(($3 + 60)) python3 -m paro_kernels.bench_decode --h2 mma5 --out "$OUT/int5.json" \
    --shapes qkv,gate_up,down,o_proj,in_proj --ms 24,32 --budget-s "$3" > "$OUT/int5.log" 2>&1
  echo "int5 bench rc $?"
  grep -vE "^(WARNING|  |gemv_mma_kernel)" "$OUT/int5.log" | cut -c1-110 | tail -50
fi
