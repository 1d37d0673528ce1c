#!/bin/bash
# Issue 14 tenth pass (H200), run 7: the configs run 6 picked, as served (int4 M = 1 on one
# wave, int5 M = 1 on 256 columns: `decode_host.H2_BY_BITS_M`), against the ninth pass's and
# around them (`bench_decode --h2 confirm`), then the GPU tests of every HFMA2 path.
# Usage: bash kernels/device34.sh BENCH_BUDGET_S TEST_LIMIT_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
(cd kernels && timeout $(($1 + 120)) python3 -m paro_kernels.bench_decode --h2 confirm --out "$OUT/h2confirm.json" \
  --shapes qkv,o_proj,gate_up,down,in_proj --ms 1,2 --budget-s "$1" > "$OUT/bench.log" 2>&1)
grep -vE "^(WARNING|  |gemv_h2_kernel)" "$OUT/bench.log" | grep -vE "cublas" | cut -c1-150
bash kernels/gputests14.sh "$2" tests/kernels/test_triton_fast_gpu.py tests/kernels/test_triton_w4a8_gpu.py \
  -k "h2 or a16_bands or graph_capture or every_output" -rf 2>&1 | tail -8
