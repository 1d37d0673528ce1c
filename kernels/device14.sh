#!/bin/bash
# Issue 14 device run (H200): bench (+ GEMV sweep), then Nsight Compute on the goal cells.
# Usage on the GPU machine, from the repo root: bash kernels/device14.sh BUDGET_S SHAPES MS [bench args]
set -o pipefail
budget=$1 shapes=$2 ms=$3; shift 3
root=$PWD
if ls "$root"/../.whl/gemlite-*.tar.gz >/dev/null 2>&1; then
  mkdir -p /tmp/gl && tar xzf "$root"/../.whl/gemlite-*.tar.gz -C /tmp/gl
  export PYTHONPATH=$(echo /tmp/gl/gemlite-*):$PYTHONPATH
fi
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv
cd kernels
python3 -m paro_kernels.bench14 --out "$OUT/bench14.json" --shapes "$shapes" --ms "$ms" \
  --budget-s "$budget" --gemlite-config "$root/kernels/gemlite-h200.json" "$@" 2>&1 | tee "$OUT/bench14.log"
cp "$root/kernels/gemlite-h200.json" "$OUT/" 2>/dev/null
