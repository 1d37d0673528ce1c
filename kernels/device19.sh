#!/bin/bash
# Issue 14 sixth pass, run 1 (H200): the MXFP4 and W4A8 GPU test files, then the MXFP4 decode
# GEMV's sweep and cells. Usage: bash kernels/device19.sh MX_LIMIT_S W4A8_LIMIT_S BENCH_BUDGET_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
bash kernels/gputests14.sh "$1" tests/kernels/test_triton_mx_gpu.py -rf -x 2>&1 | tail -15
cp "$OUT/gputests.log" "$OUT/gputests-mx.log"
bash kernels/gputests14.sh "$2" tests/kernels/test_triton_w4a8_gpu.py -rf 2>&1 | tail -8
cp "$OUT/gputests.log" "$OUT/gputests-w4a8.log"
timeout $(( $3 + 60 )) python3 -m paro_kernels.bench_mx_decode --out "$OUT/mx.json" \
  --budget-s "$3" > "$OUT/bench.log" 2>&1
grep -E "best|as served|gemv alone|gemm|cublas|int4pack|error" "$OUT/bench.log" | cut -c1-110 | tail -90
