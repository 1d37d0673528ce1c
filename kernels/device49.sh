#!/bin/bash
# Issue 14, sixteenth pass, H200: the two MXFP4 prefill forms built (and checked on CPU) without
# a GPU. First their GPU tests (the 8-bit route against fp64 and the GEMM's fp8 mode, graph
# capture; the folded rotated dequant at every launch config; the served routes around them),
# then `bench_mx_decode --prefill` on every 27B shape at MS: as served, the GEMM, the dequant path
# and the 8-bit route forced (its output against the GEMM's), the per-block and folded rotated
# dequant (path and kernel alone), `dequant8` alone; cuBLAS and int4 as served in the same run.
# Flip mx_host.W8 / DEQUANT_FOLD (and W8_MIN_M) by what it says. 0 skips a step.
# Usage: bash kernels/device49.sh TEST_LIMIT_S BUDGET_S [MS]
ms=${3:-256,2048,8192,128}
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=$root/.triton-gpu-cache  # as gpushard.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
if [ "$1" != 0 ]; then
  timeout "$1" python3 -m pytest --noconftest -q -m gpu -p no:cacheprovider -n 16 -rf \
    tests/kernels/test_triton_mx_gpu.py \
    -k "dequant or w8_route or paro_merged or custom_op or mxfp4_linear" \
    > "$OUT/gputests.log" 2>&1
  echo "tests rc $?"
  grep -E "passed|failed|FAILED|Error" "$OUT/gputests.log" | tail -12
fi
if [ "$2" != 0 ]; then
  (cd kernels && timeout $(($2 + 120)) python3 -m paro_kernels.bench_mx_decode --prefill \
    --out "$OUT/prefill.json" --shapes qkv,gate_up,down,o_proj,in_proj --ms "$ms" \
    --budget-s "$2" > "$OUT/prefill.log" 2>&1)
  echo "bench rc $?"
  grep -vE "^(WARNING|  )" "$OUT/prefill.log" | grep -E "served|gemm|dequant|w8|cublas|fold" \
    | cut -c1-100 | tail -160
fi
