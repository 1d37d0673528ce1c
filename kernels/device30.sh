#!/bin/bash
# Issue 14 ninth pass, for the next session's H200 run (not run yet: this session's device time
# ran out): the int5 HFMA2 GEMV's GPU tests, then int5 as served (matrix-unit GEMV) against it
# and int4 as served, every 27B shape at M = 1, 2. If it wins, set fast_host.INT5_H2 = True.
# Usage: bash kernels/device30.sh TEST_LIMIT_S BENCH_BUDGET_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
bash kernels/gputests14.sh "$1" tests/kernels/test_triton_w4a8_gpu.py -k "int5_h2 or int5_gemv3" -rf 2>&1 | tail -6
(cd kernels && timeout $(($2 + 120)) python3 -m paro_kernels.bench_decode --h2 int5 --out "$OUT/h2int5.json" \
  --shapes qkv,o_proj,gate_up,down,in_proj --ms 1,2 --budget-s "$2" > "$OUT/bench.log" 2>&1)
grep -vE "^(WARNING|  )" "$OUT/bench.log" | cut -c1-110 | tail -60
