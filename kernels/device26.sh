#!/bin/bash
# Issue 14 ninth pass (H200), run 1: the HFMA2 decode GEMV's GPU tests, its per-cell bench
# against the FMA GEMV, the op as served and the peers (M = 1, 2), then ncu of both GEMVs.
# Usage: bash kernels/device26.sh TEST_LIMIT_S BENCH_BUDGET_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
bash kernels/gputests14.sh "$1" tests/kernels/test_triton_fast_gpu.py -k "gemv-h2 or h2_gemv" -rf 2>&1 | tail -8
cp "$OUT/gputests.log" "$OUT/gputests-h2.log"
(cd kernels && timeout $(($2 + 200)) python3 -m paro_kernels.bench_decode --h2 run1 --out "$OUT/h2.json" \
  --shapes qkv,o_proj,gate_up,down,in_proj --ms 1,2 --budget-s "$2" --jobs 14 > "$OUT/bench.log" 2>&1)
grep -vE "^(WARNING|  )" "$OUT/bench.log" | cut -c1-160 | tail -120
bash kernels/ncu14.sh "gate_up 1 gemv-h2" "gate_up 1 gemv-prologue"
