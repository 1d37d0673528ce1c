#!/bin/bash
# Issue 14, fourteenth pass, H200, run 3: the MXFP4 GPU file in full, the mma GEMV's configs
# (bench_mx_decode --mma at MS on SHAPES: register caps, unroll, programs an SM), and ncu of
# MXFP4 as served (the mma GEMV on bf16 rows) at gate_up M = 1 and 16.
# Usage: bash kernels/device43.sh TEST_LIMIT_S BUDGET_S [MS] [SHAPES]
ms=${3:-1,4,16}
shapes=${4:-gate_up,qkv,down}
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
if [ "$1" != 0 ]; then
  bash kernels/gputests14.sh "$1" tests/kernels/test_triton_mx_gpu.py -rf 2>&1 | grep -v arn | tail -6
fi
if [ "$2" != 0 ]; then
  (cd kernels && timeout $(($2 + 120)) python3 -m paro_kernels.bench_mx_decode --mma \
    --out "$OUT/mma.json" --shapes "$shapes" --ms "$ms" --budget-s "$2" > "$OUT/bench.log" 2>&1)
  grep -vE "^(WARNING|  )" "$OUT/bench.log" | grep -v "paro\|cublas" | cut -c1-110 | tail -70
fi
NCU_GREP="|Block Limit Registers|Executed Ipc Active|Issue Slots Busy" bash kernels/ncu14.sh "gate_up 1 mx" "gate_up 16 mx" 2>&1 | tail -30
