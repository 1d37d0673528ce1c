#!/bin/bash
# Issue 14 tenth pass (H200), run 6: the HFMA2 GEMV on grids of whole waves (int4 3 / 6
# programs an SM, kw 8) and int5 on narrower tiles (`bench_decode --h2 waves`), every 27B shape
# at M = 1, 2, the prologue op at the shipped config and the peers in the same run.
# Usage: bash kernels/device33.sh BENCH_BUDGET_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
(cd kernels && timeout $(($1 + 120)) python3 -m paro_kernels.bench_decode --h2 waves --out "$OUT/h2waves.json" \
  --shapes qkv,o_proj,gate_up,down,in_proj --ms 1,2 --budget-s "$1" > "$OUT/bench.log" 2>&1)
grep -vE "^(WARNING|  |gemv_h2_kernel)" "$OUT/bench.log" | grep -vE "cublas" | cut -c1-150
