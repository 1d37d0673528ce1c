#!/bin/bash
# Issue 14, thirteenth pass, H200: int5 on the mma.sync GEMV and the one-wave split.
# `bench_decode --h2 mma5` on every 27B shape at MS5 (int4 and int5 as served, int5 before
# forced, the int5 mma op's configs, its GEMV alone), `bench_decode --h2 mma` at MS4 (the int4
# op's configs: the one-wave split against the twelfth pass's 8 an SM, the blocks prologue),
# then the GPU tests `-k TESTS` of the three GPU files (default: the int5 mma GEMV against fp64
# and the served W4A8 bands). A budget or limit of 0 skips that step.
# Run 1: bash kernels/device41.sh 200 260 90 (then tests first; MS5 1,2,4,8,16, MS4 9,16).
# Usage: bash kernels/device41.sh TEST_LIMIT_S BUDGET5_S BUDGET4_S [MS5] [MS4] [TESTS]
ms5=${4:-1,2,4,8,16}
ms4=${5:-9,16}
tests=${6:-int5_mma_gemv or a16_bands}
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
cd kernels
if [ "$2" != 0 ]; then
  timeout $(($2 + 120)) python3 -m paro_kernels.bench_decode --h2 mma5 --out "$OUT/mma5.json" \
    --shapes qkv,gate_up,down,o_proj,in_proj --ms "$ms5" --budget-s "$2" > "$OUT/bench5.log" 2>&1
  grep -vE "^(WARNING|  |gemv_mma_kernel)" "$OUT/bench5.log" | cut -c1-150 | tail -4
fi
if [ "$3" != 0 ]; then
  timeout $(($3 + 120)) python3 -m paro_kernels.bench_decode --h2 mma --out "$OUT/mma4.json" \
    --shapes qkv,gate_up,down,o_proj,in_proj --ms "$ms4" --budget-s "$3" > "$OUT/bench4.log" 2>&1
  grep -vE "^(WARNING|  |gemv_mma_kernel)" "$OUT/bench4.log" | grep -vE "cublas" | cut -c1-150 \
    | tail -4
fi
cd "$root"
if [ "$1" != 0 ]; then
  bash kernels/gputests14.sh "$1" tests/kernels/test_triton_fast_gpu.py \
    tests/kernels/test_triton_w4a8_gpu.py tests/kernels/test_triton_gpu.py -k "$tests" -rf 2>&1 \
    | tail -8
fi
