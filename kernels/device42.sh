#!/bin/bash
# Issue 14, fourteenth pass, H200: MXFP4 on the mma.sync GEMV.
# The GPU tests `-k TESTS` of the MXFP4 GPU file first (default: the mma GEMV's), then
# `bench_mx_decode --mma` on every 27B shape at MS (MXFP4 / MXFP4-PARO as served against the
# paths they took before, int4 as served, cuBLAS, the mma GEMV alone at its configs).
# A budget or limit of 0 skips that step.
# Usage: bash kernels/device42.sh TEST_LIMIT_S BUDGET_S [MS] [TESTS]
ms=${3:-1,2,4,8,16}
tests=${4:-mma}
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
if [ "$1" != 0 ]; then
  bash kernels/gputests14.sh "$1" tests/kernels/test_triton_mx_gpu.py -k "$tests" -rf 2>&1 \
    | tail -12
fi
cd kernels
if [ "$2" != 0 ]; then
  timeout $(($2 + 120)) python3 -m paro_kernels.bench_mx_decode --mma --out "$OUT/mma.json" \
    --shapes qkv,gate_up,down,o_proj,in_proj --ms "$ms" --budget-s "$2" > "$OUT/bench.log" 2>&1
  grep -vE "^(WARNING|  )" "$OUT/bench.log" | cut -c1-160 | tail -80
fi
