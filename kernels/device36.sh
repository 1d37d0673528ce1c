#!/bin/bash
# Issue 14, for the next session's H200 run (built after the tenth pass's device time ran out;
# not run yet): the co-resident rotation inside the HFMA2 GEMV (`gemv_h2_rot(coop=)`, a
# cooperative one-wave grid): its GPU tests (CUDA-graph replays, coop 0 / 3), then
# `bench_decode --h2 coop` on every 27B shape at M = 1, 2 against the prologue op (as served)
# and the rotators-at-head variant, the registers of each. Serve it (`fast_host.H2_ROT`, with
# coop the default) only if it beats the prologue op in the same run.
# Usage: bash kernels/device36.sh TEST_LIMIT_S BENCH_BUDGET_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
bash kernels/gputests14.sh "$1" tests/kernels/test_triton_w4a8_gpu.py -k "rotation_inside or int5_h2" -rf 2>&1 | tail -8
(cd kernels && timeout $(($2 + 120)) python3 -m paro_kernels.bench_decode --h2 coop --out "$OUT/h2coop.json" \
  --shapes qkv,o_proj,gate_up,down,in_proj --ms 1,2 --budget-s "$2" > "$OUT/bench.log" 2>&1)
grep -vE "^(WARNING|  |gemv_h2_kernel)" "$OUT/bench.log" | grep -vE "cublas" | cut -c1-150
