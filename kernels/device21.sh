#!/bin/bash
# Issue 14 seventh pass, run 1 (H200): the MXFP4 GPU test file, then the GEMV sweep with the
# previous tree's kernel A/B at every config (the 3d7c87d kernel, copied to _mx_old.py by
# `git show 3d7c87d:kernels/paro_kernels/triton/mx_decode_kernels.py`), the int5 decode rows
# (int5_cells), then the cells.
# Usage: bash kernels/device21.sh MX_LIMIT_S BENCH_BUDGET_S (MX_LIMIT_S 0: no test run)
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
[ "$1" -gt 0 ] && bash kernels/gputests14.sh "$1" tests/kernels/test_triton_mx_gpu.py -rf 2>&1 | tail -14
[ "$1" -gt 0 ] && cp "$OUT/gputests.log" "$OUT/gputests-mx.log"
timeout $(( $2 + 150 )) python3 -m paro_kernels.bench_mx_decode --out "$OUT/mx.json" \
  --shapes qkv,gate_up,down,in_proj,o_proj --budget-s "$2" --old paro_kernels.triton._mx_old \
  --int5-ms 1,4,16 \
  > "$OUT/bench.log" 2>&1
grep -E "precompiled|best|as served|gemv alone|a16 gemm|cublas|int4pack|int5|error" "$OUT/bench.log" | cut -c1-150 | tail -70
