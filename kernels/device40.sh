#!/bin/bash
# Issue 14, twelfth pass, H200: the mma.sync GEMV's GPU tests and the served dispatch's (the
# linear at M = 2, 5, 8, 16, the W4A8 16-bit bands, graph capture), then `bench_decode --h2
# mma` on every 27B shape at MS (as served, the path served before forced, the mma op's
# configs and with the blocks prologue, the GEMVs and the records prologue alone).
# Run 3: bash kernels/device40.sh 330 260 1,2,4,8; run 5: bash kernels/device40.sh 100 100 16,9
# "a16_bands or graph_capture".
# Usage: bash kernels/device40.sh TEST_LIMIT_S BUDGET_S [MS] [TESTS]
ms=${3:-1,2,4,8}
tests=${4:-mma_gemv or a16_bands or graph_capture or w4a16_linear_matches}
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
bash kernels/gputests14.sh "$1" tests/kernels/test_triton_fast_gpu.py \
  tests/kernels/test_triton_w4a8_gpu.py tests/kernels/test_triton_gpu.py -k "$tests" -rf 2>&1 \
  | tail -8
(cd kernels && timeout $(($2 + 120)) python3 -m paro_kernels.bench_decode --h2 mma \
  --out "$OUT/h2mma.json" --shapes qkv,gate_up,down,o_proj,in_proj --ms "$ms" \
  --budget-s "$2" > "$OUT/bench.log" 2>&1)
grep -vE "^(WARNING|  |gemv_mma_kernel)" "$OUT/bench.log" | grep -vE "cublas" | cut -c1-150
