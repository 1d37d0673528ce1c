#!/bin/bash
# Issue 14, twenty-third pass: the mid band's launch configurations (kernels/paro_kernels/
# sweep_mid.py: int4 W4A16, int4 W4A8 fp8 and MXFP4 fp8 GEMMs alone at row tiles 16-128 and
# split-K to 1-8 programs per SM, cuBLAS bf16 in the same cell, 27B TP=2 shapes).
# Usage: bash kernels/device51.sh BUDGET_S [MS] [SHAPES]
root=$PWD
export PYTHONPATH=$root/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
n=1; while [ -e "$OUT/sweep-mid-$n.json" ]; do n=$((n + 1)); done
(cd kernels && timeout $(($1 + 90)) python3 -m paro_kernels.sweep_mid "$OUT/sweep-mid-$n.json" \
  --budget-s "$1" --ms "${2:-64,32,128,192,24,48,96}" --shapes "${3:-qkv,gate_up,down,o_proj,in_proj}" \
  > "$OUT/sweep-mid-$n.log" 2>&1)
echo "rc $?"
grep -v "^  " "$OUT/sweep-mid-$n.log" | tail -80
grep "^  " "$OUT/sweep-mid-$n.log" | sort | uniq -c | head -10
