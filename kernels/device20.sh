#!/bin/bash
# Issue 14 sixth pass, run 3 (H200): the MXFP4 GPU test file, the W4A8 A16-band test (gemv3 at
# M = 9..16), then the MXFP4 decode GEMV's per-M sweep and the cells.
# Usage: bash kernels/device20.sh MX_LIMIT_S W4A8_LIMIT_S BENCH_BUDGET_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
bash kernels/gputests14.sh "$1" tests/kernels/test_triton_mx_gpu.py -rf 2>&1 | tail -14
cp "$OUT/gputests.log" "$OUT/gputests-mx.log"
bash kernels/gputests14.sh "$2" tests/kernels/test_triton_w4a8_gpu.py -k a16_bands -rf 2>&1 | tail -6
cp "$OUT/gputests.log" "$OUT/gputests-w4a8.log"
timeout $(( $3 + 120 )) python3 -m paro_kernels.bench_mx_decode --out "$OUT/mx.json" \
  --shapes qkv,gate_up,down,in_proj,o_proj --budget-s "$3" > "$OUT/bench.log" 2>&1
grep -E "precompiled|best|as served|gemv alone|a16 gemm|cublas|int4pack|error" "$OUT/bench.log" | cut -c1-140 | tail -90
