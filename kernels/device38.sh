#!/bin/bash
# Issue 14, eleventh pass, H200 (run 3; the records prologue now served): the HFMA2 op's paired prologue from the Givens records
# (`fast_host.rotate_givens_paired`) against the sliced blocks prologue: its GPU tests, then
# `bench_decode --h2 gvpdl` (run 3) on every 27B shape at M = 1, 2 (2 warps, PDL, the two
# prologues alone). Usage: bash kernels/device38.sh TEST_LIMIT_S BENCH_BUDGET_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
bash kernels/gputests14.sh "$1" tests/kernels/test_triton_fast_gpu.py \
  tests/kernels/test_triton_w4a8_gpu.py -k "h2 or a16_bands" -rf 2>&1 | tail -8
(cd kernels && timeout $(($2 + 120)) python3 -m paro_kernels.bench_decode --h2 gvpdl --out "$OUT/h2gvpdl.json" \
  --shapes qkv,o_proj,gate_up,down,in_proj --ms 1,2 --budget-s "$2" > "$OUT/bench.log" 2>&1)
grep -vE "^(WARNING|  |gemv_h2_kernel)" "$OUT/bench.log" | grep -vE "cublas" | cut -c1-150
