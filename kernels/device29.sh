#!/bin/bash
# Issue 14 ninth pass (H200), run 4: the GPU test files the HFMA2 dispatch reaches, whole where
# they fit (test_triton_fast_gpu.py), the W4A8 decode cases, then the shipped-cache walk.
# Usage: bash kernels/device29.sh FAST_LIMIT_S W4A8_LIMIT_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
bash kernels/gputests14.sh "$1" tests/kernels/test_triton_fast_gpu.py -rf 2>&1 | tail -6
cp "$OUT/gputests.log" "$OUT/gputests-fast.log"
bash kernels/gputests14.sh "$2" tests/kernels/test_triton_w4a8_gpu.py -k "a16_bands or w4a8_linear or custom_op" -rf 2>&1 | tail -6
cp "$OUT/gputests.log" "$OUT/gputests-w4a8.log"
timeout 100 python3 -m pytest --noconftest -q -m gpu -p no:cacheprovider tests/kernels/test_precompiled_gpu.py -rA 2>&1 | tail -3
