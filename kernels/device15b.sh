#!/bin/bash
# Issue 14 fourth pass, run 3 (H200): the Givens-inside GEMV's sweep again (records loaded before
# the gathers; 8-warp tiles), then test_triton_w4a8_gpu.py in full.
# Usage on the GPU machine, from the repo root: bash kernels/device15b.sh SHAPES TEST_LIMIT_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
(cd kernels && timeout 200 python3 -m paro_kernels.bench14 --out "$OUT/sweep5b.json" --shapes none \
  --ms 1 --sweep5 --sweep-shapes "$1" --no-check > "$OUT/sweep5b.log" 2>&1; echo "sweep rc $?")
grep "^rot2" "$OUT/sweep5b.log" | cut -c1-110
bash kernels/gputests14.sh "$2" tests/kernels/test_triton_w4a8_gpu.py -rA > /dev/null 2>&1
grep -E "^w8 |passed|failed|FAILED|Error" "$OUT/gputests.log" | tail -40
cp "$OUT/gputests.log" "$OUT/gputests_w4a8.log"
