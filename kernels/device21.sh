#!/bin/bash
# Issue 14 seventh pass, run 1 (H200): the MXFP4 GPU test file and the W4A8 file's int5 / band
# cases, then the GEMV sweep with the previous tree's kernel A/B at every config (the 3d7c87d
# kernel, copied to _mx_old.py by `git show
# 3d7c87d:kernels/paro_kernels/triton/mx_decode_kernels.py`), the int5 decode rows
# (int5_cells), then the cells until the budget.
# Usage: bash kernels/device21.sh MX_LIMIT_S W4A8_LIMIT_S BENCH_BUDGET_S (a limit 0: not run)
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
if [ "$1" -gt 0 ]; then
  bash kernels/gputests14.sh "$1" tests/kernels/test_triton_mx_gpu.py -rf 2>&1 | tail -8
  cp "$OUT/gputests.log" "$OUT/gputests-mx.log"
fi
if [ "$2" -gt 0 ]; then
  bash kernels/gputests14.sh "$2" tests/kernels/test_triton_w4a8_gpu.py \
    -k "int5_gemv3 or a16_bands" -rf 2>&1 | tail -8
  cp "$OUT/gputests.log" "$OUT/gputests-w4a8.log"
fi
timeout $(( $3 + 100 )) python3 -m paro_kernels.bench_mx_decode --out "$OUT/mx.json" \
  --shapes qkv,gate_up,down,in_proj,o_proj --budget-s "$3" --old paro_kernels.triton._mx_old \
  --int5-ms 1,4,16 > "$OUT/bench.log" 2>&1
grep -E "precompiled|best|as served|gemv alone|a16 gemm|cublas|int4pack|int5|error" "$OUT/bench.log" | cut -c1-150 | tail -70
