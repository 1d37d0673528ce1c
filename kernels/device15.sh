#!/bin/bash
# Issue 14 fourth pass, exploration run (H200): the new paths' errors on the test cases, the
# Givens-inside GEMV's config sweep (M = 1, 2), the W4A8 8-bit prefill GEMMs at M = 2048, ncu.
# Usage on the GPU machine, from the repo root: bash kernels/device15.sh
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv
timeout 120 python3 tests/kernels/smoke15.py > "$OUT/smoke.log" 2>&1; echo "smoke rc $?"
grep -v "^rot2" "$OUT/smoke.log" | cut -c1-400; grep "^rot2" "$OUT/smoke.log" | sort -t' ' -k7 | tail -3
cd kernels
timeout 230 python3 -m paro_kernels.bench14 --out "$OUT/sweep5.json" --shapes none --ms 1 --sweep5 \
  --no-check > "$OUT/sweep5.log" 2>&1; echo "sweep rc $?"
grep "^rot2" "$OUT/sweep5.log" | cut -c1-110
if [ "$1" = w8 ]; then
timeout 120 python3 -m paro_kernels.bench14 --out "$OUT/w8.json" --shapes qkv,gate_up,down --ms 2048 \
  --no-check --skip int4pack,gemlite-a16w4,gemlite-a8w4,path-mma > "$OUT/w8.log" 2>&1; echo "w8 rc $?"
grep "M=" "$OUT/w8.log" | cut -c1-100
fi
cd ..
bash kernels/ncu14.sh "gate_up 1 gemv" "qkv 1 gemv" 2>&1 | grep -v "==" | tail -30
