#!/bin/bash
# Issue 14 sixth pass, run 4 (H200): the MXFP4 GPU test file on the final routing (GEMV to
# M = 2, the A16 GEMM to M = 4), then the as-served cells at M = 1..4 on qkv and gate_up.
# Usage: bash kernels/device20b.sh MX_LIMIT_S BENCH_BUDGET_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
bash kernels/gputests14.sh "$1" tests/kernels/test_triton_mx_gpu.py -rf 2>&1 | tail -8
cp "$OUT/gputests.log" "$OUT/gputests-mx.log"
timeout $(( $2 + 60 )) python3 -m paro_kernels.bench_mx_decode --out "$OUT/mx.json" \
  --shapes gate_up,qkv --ms 1,2,3,4 --sweep "" --budget-s "$2" > "$OUT/bench.log" 2>&1
grep -E "as served|error" "$OUT/bench.log" | cut -c1-100 | tail -40
