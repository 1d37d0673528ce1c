#!/bin/bash
# Issue 14 sixth pass, run 2 (H200): the MXFP4 GPU test file, then the MXFP4 decode GEMV's
# sweep and cells. Usage: bash kernels/device19b.sh MX_LIMIT_S BENCH_BUDGET_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
bash kernels/gputests14.sh "$1" tests/kernels/test_triton_mx_gpu.py -rf 2>&1 | tail -12
cp "$OUT/gputests.log" "$OUT/gputests-mx.log"
timeout $(( $2 + 90 )) python3 -m paro_kernels.bench_mx_decode --out "$OUT/mx.json" \
  --budget-s "$2" > "$OUT/bench.log" 2>&1
grep -E "precompiled|best|as served|gemv alone|cublas|int4pack|error" "$OUT/bench.log" | cut -c1-150 | tail -80
