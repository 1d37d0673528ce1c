#!/bin/bash
# Issue 14 ninth pass (H200), run 2: the decode band on the HFMA2 GEMV as served (GPU tests of
# every path that reaches it: W4A16 gemv / gemv-prologue, W4A8 decode, graph capture, the
# shipped-cache walk), then the run-2 variants (bench_decode --h2 run2) on every 27B shape.
# Usage: bash kernels/device27.sh TEST_LIMIT_S BENCH_BUDGET_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
bash kernels/gputests14.sh "$1" tests/kernels/test_triton_fast_gpu.py tests/kernels/test_triton_w4a8_gpu.py \
  -k "(path_matches and gemv and not gemv3) or h2_gemv or graph_capture or every_output or a16_bands or custom_op or w4a8_linear" -rf 2>&1 | tail -8
cp "$OUT/gputests.log" "$OUT/gputests-run2.log"
timeout 110 python3 -m pytest --noconftest -q -m gpu -p no:cacheprovider tests/kernels/test_precompiled_gpu.py -rA 2>&1 | tail -4
(cd kernels && timeout $(($2 + 150)) python3 -m paro_kernels.bench_decode --h2 run2 --out "$OUT/h2run2.json" \
  --shapes qkv,o_proj,gate_up,down,in_proj --ms 1,2 --budget-s "$2" --jobs 14 > "$OUT/bench.log" 2>&1)
grep -vE "^(WARNING|  )" "$OUT/bench.log" | grep -v "alone\|prologue" | cut -c1-130 | tail -100
