#!/bin/bash
# Issue 14, fifteenth pass, H200: MXFP4 prefill on the dequant path. The GPU tests first (the
# MXFP4 file -k MXTESTS: the dequant against fp64, the served routes it changes, graphs; the
# W4A8 file -k EXTRA, default "int5_mma_gemv": the int5 two-tile register cap; EXTRA="" runs
# none), then `bench_mx_decode --prefill` on every 27B shape at MS (as served, the GEMM and the
# dequant path forced, the dequant alone; since the sixteenth pass also the 8-bit route,
# `dequant8` alone and the folded rotated dequant; cuBLAS and int4 as served in the same run).
# 0 skips a step. kernels/device49.sh runs it for the sixteenth pass. The tests run one OpenMP
# thread a worker (gpushard.sh says why).
# Usage: bash kernels/device47.sh TEST_LIMIT_S BUDGET_S [MS] [MXTESTS]
ms=${3:-64,128,256,512,2048,8192}
mxtests=${4:-dequant or paro_merged or custom_op or exponent_range or mxfp4_linear or plugin}
extra=${EXTRA-int5_mma_gemv}
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=$root/.triton-gpu-cache  # as gpushard.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
if [ "$1" != 0 ]; then
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 timeout "$1" python3 -m pytest --noconftest -q -m gpu \
    -p no:cacheprovider -n 16 -rf -p _compile_stats --junitxml="$OUT/gputests.xml" \
    tests/kernels/test_triton_mx_gpu.py tests/kernels/test_triton_w4a8_gpu.py \
    -k "($mxtests) and not int5${extra:+ or $extra}" > "$OUT/gputests.log" 2>&1
  echo "tests rc $?"
  grep -E "passed|failed|FAILED|Error" "$OUT/gputests.log" | tail -12
fi
if [ "$2" != 0 ]; then
  (cd kernels && timeout $(($2 + 120)) python3 -m paro_kernels.bench_mx_decode --prefill \
    --out "$OUT/prefill.json" --shapes qkv,gate_up,down,o_proj,in_proj --ms "$ms" \
    --budget-s "$2" > "$OUT/prefill.log" 2>&1)
  echo "bench rc $?"
  grep -vE "^(WARNING|  )" "$OUT/prefill.log" | grep -E "served|gemm|dequant|w8|fold|cublas" \
    | cut -c1-100 | tail -160
fi
