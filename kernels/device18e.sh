#!/bin/bash
# Issue 14 fifth pass, run 5 (H200): the GPU test files the fifth pass changed or re-routed, in
# full, on the final tree, then the precompiled-cache test (its walk now visits the M = 9..16
# GEMV). Usage: bash kernels/device18e.sh FAST_S GPU_S PRE_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
for f in fast:$1 gpu:$2; do
  t0=$SECONDS; n=${f%%:*}; file=tests/kernels/test_triton_${n}_gpu.py
  [ "$n" = gpu ] && file=tests/kernels/test_triton_gpu.py
  bash kernels/gputests14.sh "${f#*:}" "$file" -rf > /dev/null 2>&1
  mv "$OUT/gputests.log" "$OUT/gpu-$n.log"
  echo "== $n: $((SECONDS - t0)) s"; grep -E "passed|failed|FAILED|Error" "$OUT/gpu-$n.log" | tail -8
done
t0=$SECONDS
timeout "$3" python3 -m pytest --noconftest -q -s -m gpu -p no:cacheprovider \
  tests/kernels/test_precompiled_gpu.py > "$OUT/precompiled.log" 2>&1
echo "== precompiled: $((SECONDS - t0)) s"
grep -E "H200 kernel cache|compile|passed|failed|Error" "$OUT/precompiled.log" | tail -6
