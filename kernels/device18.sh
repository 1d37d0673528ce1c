#!/bin/bash
# Issue 14 fifth pass, run 1 (H200): the GPU test files that never ran to completion, in full, on
# the tree as it was (their own limits). Usage: bash kernels/device18.sh FAST_S MX_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv
for f in fast:$1 mx:$2; do
  t0=$SECONDS
  bash kernels/gputests14.sh "${f#*:}" "tests/kernels/test_triton_${f%%:*}_gpu.py" -rf > /dev/null 2>&1
  mv "$OUT/gputests.log" "$OUT/gpu-${f%%:*}.log"
  echo "== ${f%%:*}: $((SECONDS - t0)) s"; grep -E "passed|failed|FAILED|Error" "$OUT/gpu-${f%%:*}.log" | tail -8
done
