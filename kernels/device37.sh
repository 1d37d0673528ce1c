#!/bin/bash
# Issue 14, eleventh pass, H200: the HFMA2 op's paired prologue from the Givens records
# (`fast_host.rotate_givens_paired`) against the sliced blocks prologue: its GPU tests (-k TESTS),
# then `bench_decode --h2 MODE` on every 27B shape at M = 1, 2. Run 2: MODE gv (the op at 1 / 2 /
# 4 warps, the two prologues alone; the default); run 3: `device38.sh` (gvpdl).
# Twelfth pass: MODE mma (the mma.sync GEMV), TESTS mma_gemv, MS 1,2,4,8.
# Usage: bash kernels/device37.sh TEST_LIMIT_S BENCH_BUDGET_S [MODE] [TESTS] [MS]
mode=${3:-gv}
tests=${4:-h2_prologues or int5_h2}
ms=${5:-1,2}
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
bash kernels/gputests14.sh "$1" tests/kernels/test_triton_fast_gpu.py \
  tests/kernels/test_triton_w4a8_gpu.py -k "$tests" -rf 2>&1 | tail -8
(cd kernels && timeout $(($2 + 120)) python3 -m paro_kernels.bench_decode --h2 "$mode" \
  --out "$OUT/h2$mode.json" --shapes qkv,gate_up,down,o_proj,in_proj --ms "$ms" --budget-s "$2" \
  > "$OUT/bench.log" 2>&1)
grep -vE "^(WARNING|  |gemv_h2_kernel|gemv_mma_kernel)" "$OUT/bench.log" | grep -vE "cublas" | cut -c1-150
