#!/bin/bash
# Issue 14 ninth pass (H200), run 3: the HFMA2 op with PDL and with a one-block fp16 prologue
# (bench_decode --h2 run3), every 27B shape at M = 1, 2, peers in the same run.
# Usage: bash kernels/device28.sh BENCH_BUDGET_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
(cd kernels && timeout $(($1 + 120)) python3 -m paro_kernels.bench_decode --h2 run3 --out "$OUT/h2run3.json" \
  --shapes qkv,o_proj,gate_up,down,in_proj --ms 1,2 --budget-s "$1" --jobs 14 > "$OUT/bench.log" 2>&1)
grep -vE "^(WARNING|  )" "$OUT/bench.log" | cut -c1-110 | tail -140
