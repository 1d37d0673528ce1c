#!/bin/bash
# Issue 14 pass 3, final device run (H200): the changed GPU test file and the precompiled-cache
# test in full, then the bench in the time left (goal cells first).
# Usage on the GPU machine, from the repo root: bash kernels/device14b.sh TOTAL_S
total=$1 start=$SECONDS
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
bash kernels/gputests14.sh 230 tests/kernels/test_triton_fast_gpu.py -rf
cp "$OUT/gputests.log" "$OUT/gputests_fast.log"
timeout 150 python3 -m pytest --noconftest -q -s -m gpu -p no:cacheprovider \
  tests/kernels/test_precompiled_gpu.py > "$OUT/precompiled.log" 2>&1
grep -E "H200 kernel cache|passed|failed|Error" "$OUT/precompiled.log" | tail -5
left=$((total - (SECONDS - start) - 70))
echo "bench budget ${left}s"
bash kernels/device14.sh "$left" qkv,o_proj,gate_up,down,in_proj 1,16,2048,8192,2 \
  --skip path-gemv-rot,path-gemv-blocks,path-mma --skip-prefill int4pack,path-dequant \
  > "$OUT/dev.log" 2>&1
grep -E "M=(1|16|2048|8192|2) (cublas|ours|int4pack|gemlite-a16w4|path-w4a8)" "$OUT/bench14.log" \
  | cut -c1-90
