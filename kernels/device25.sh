#!/bin/bash
# Issue 14 eighth pass (H200), run 2: the W4A8 GPU test file whole (int5 on its own GEMV
# config, every int5 layer on the GEMV), then the int5 rows as served with the config sweep
# around GEMV3_INT5 beside the config that served before, and the qkv M = 1 cells (peers).
# Usage: bash kernels/device25.sh TEST_LIMIT_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
bash kernels/gputests14.sh "$1" tests/kernels/test_triton_w4a8_gpu.py -rf 2>&1 | tail -6
cp "$OUT/gputests.log" "$OUT/gputests-w4a8.log"
timeout 420 python3 -m paro_kernels.bench_mx_decode --out "$OUT/int5.json" --sweep "" --ms 1 \
  --shapes qkv --budget-s 30 --int5-ms 1,4,16 --int5-sweep > "$OUT/bench.log" 2>&1
grep -E "int5|cublas|int4pack|as served|error|Traceback" "$OUT/bench.log" | cut -c1-150 | tail -130
