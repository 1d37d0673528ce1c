#!/bin/bash
# Issue 14 tenth pass (H200), run 8 (not run: the machine did not start; run 9 ran its tests):
# the dispatch as committed (o_proj M = 1 on the HFMA2 GEMV) against the
# alternatives (`bench_decode --h2 confirm`, M = 1), then the GPU tests of the decode paths.
# Usage: bash kernels/device35.sh BENCH_BUDGET_S TEST_LIMIT_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
(cd kernels && timeout $(($1 + 90)) python3 -m paro_kernels.bench_decode --h2 confirm --out "$OUT/h2confirm.json" \
  --shapes qkv,o_proj,gate_up,down,in_proj --ms 1 --budget-s "$1" > "$OUT/bench.log" 2>&1)
grep -vE "^(WARNING|  |gemv_h2_kernel)" "$OUT/bench.log" | grep -vE "cublas" | cut -c1-130
bash kernels/gputests14.sh "$2" tests/kernels/test_triton_fast_gpu.py tests/kernels/test_triton_w4a8_gpu.py \
  -k "h2 or a16_bands or (path_matches and gemv and not gemv3)" -rf 2>&1 | tail -8
