#!/bin/bash
# Issue 14 tenth pass (H200), runs 2-3: the rotation inside the HFMA2 GEMV (one launch): its GPU
# tests (every W4A16 case forced to "gemv-h2-rot", int5, CUDA-graph replays at claims of 128
# and 32 channels), then `bench_decode --h2 rot` on every 27B shape at M = 1, 2 (peers, the
# prologue op and the op as served in the same run) and the kernels' registers / spills.
# Usage: bash kernels/device31.sh TEST_LIMIT_S BENCH_BUDGET_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
bash kernels/gputests14.sh "$1" tests/kernels/test_triton_fast_gpu.py tests/kernels/test_triton_w4a8_gpu.py \
  -k "h2" -rf 2>&1 | tail -8
(cd kernels && timeout $(($2 + 150)) python3 -m paro_kernels.bench_decode --h2 rot --out "$OUT/h2rot.json" \
  --shapes qkv,o_proj,gate_up,down,in_proj --ms 1,2 --budget-s "$2" > "$OUT/bench.log" 2>&1)
grep -vE "^(WARNING|  )" "$OUT/bench.log" | cut -c1-150 | tail -150
