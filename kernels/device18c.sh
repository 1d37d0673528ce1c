#!/bin/bash
# Issue 14 fifth pass, run 3 (H200): the decode A/B (`bench_decode --ab`: PDL on the shipped FMA
# GEMV and on the matrix-unit GEMV, every forced path per cell, cuBLAS and int4pack beside them),
# then ncu of the PDL pair. Usage: bash kernels/device18c.sh BUDGET_S MS
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
(cd kernels && python3 -m paro_kernels.bench_decode --ab --out "$OUT/ab.json" --budget-s "$1" \
  --ms "$2" > "$OUT/ab.log" 2>&1)
grep -E "precompiled|error|Error" "$OUT/ab.log" | head -5
sed -E 's/ (us|HBM)//g' "$OUT/ab.log" | grep -v precompiled | cut -c1-70
