#!/bin/bash
# Issue 14 fifth pass, run 4 (H200): the committed decode rows (bench14, every peer in the same
# run and cell, the shipped paths forced beside the as-served op), then Nsight Compute of the
# new M = 16 path and the tile kernels it replaced. Usage: bash kernels/device18d.sh BUDGET_S MS
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
bash kernels/device14.sh "$1" qkv,o_proj,gate_up,down,in_proj "$2" --no-check \
  --skip path-gemv-rot,path-w4a8-int8-a8 > "$OUT/dev.log" 2>&1
grep -E "(cublas|ours|int4pack|gemlite|fp8|path)" "$OUT/bench14.log" | sed -E 's/ (us|cuBLAS|peer)//g' | cut -c1-72
bash kernels/ncu14.sh "gate_up 16 gemv3" "qkv 16 gemv3" 2>&1 | grep -v "==" | tail -14
