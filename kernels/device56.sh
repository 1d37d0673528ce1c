#!/bin/bash
# Issue 14, twenty-fifth pass, in one call:
# 1. `bench_decode --h2 gvrows` at GV_MS (default 9,16,24,32): the records prologue in row blocks
#    (`fast_host.GIVENS_ROWS` 0 / 4 / 8 / 16) under the int4 mma op and alone, against the
#    blocks prologue and int4 as served, then the GIVENS_ROWS and `decode_host.mma_blocks`
#    thresholds it supports (`paro_kernels.decide_gvrows`).
# 2. `device55.sh LIMIT_S MX_BUDGET_S INT5_BUDGET_S`: the whole GPU suite (with this pass's row
#    blocks test), the MXFP4 32-row chunks at 40 / 48 / 64 as served, int5 on four tiles.
# Usage: bash kernels/device56.sh GV_BUDGET_S LIMIT_S MX_BUDGET_S INT5_BUDGET_S [GV_MS]
root=$PWD
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
if [ "$1" != 0 ]; then
  (export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH \
     PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$root/.triton-gpu-cache
   cd kernels && timeout $(($1 + 60)) python3 -m paro_kernels.bench_decode --h2 gvrows \
     --out "$OUT/gvrows.json" --shapes qkv,gate_up,down,o_proj,in_proj --ms "${5:-9,16,24,32}" \
     --budget-s "$1" > "$OUT/gvrows.log" 2>&1
   echo "gvrows bench rc $?"
   # the settings the run supports, by the rules in paro_kernels.decide_gvrows (twenty-sixth pass)
   python3 -m paro_kernels.decide_gvrows "$OUT/gvrows.json")
  grep -vE "^(WARNING|  |gemv_mma_kernel)" "$OUT/gvrows.log" | grep -v int4pack | cut -c1-100 | tail -300
fi
bash kernels/device55.sh "$2" "$3" "$4"
