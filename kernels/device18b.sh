#!/bin/bash
# Issue 14 fifth pass, run 2 (H200): the decode sweep (`paro_kernels.bench_decode`: the
# matrix-unit GEMV's configs, then per cell the peers, ours as served and the candidates), then
# Nsight Compute of the shipped decode paths and the candidate at M = 1 and 16.
# Usage: bash kernels/device18b.sh BUDGET_S [bench_decode args]
budget=$1; shift
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv
(cd kernels && python3 -m paro_kernels.bench_decode --out "$OUT/decode.json" --budget-s "$budget" \
  "$@" > "$OUT/decode.log" 2>&1)
grep -E "precompiled|top configs|error" "$OUT/decode.log" | head -8
grep -vE "gemv3-alone|precompiled|top configs" "$OUT/decode.log" | cut -c1-110
bash kernels/ncu14.sh "gate_up 1 gemv" "gate_up 16 mma" "gate_up 1 gemv3" "gate_up 16 gemv3" 2>&1 | grep -v "^==" | tail -24
