#!/bin/bash
# Issue 14 fourth pass, final run (H200): the changed GPU test files in full, the precompiled-cache
# test, the bench's goal cells with every peer in the time left, Nsight Compute of the fused GEMV.
# Usage on the GPU machine, from the repo root: bash kernels/device15c.sh TOTAL_S TEST_S
total=$1 start=$SECONDS
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
bash kernels/gputests14.sh "$2" tests/kernels/test_triton_fast_gpu.py tests/kernels/test_triton_gpu.py -rf > /dev/null 2>&1
grep -E "passed|failed|FAILED|Error" "$OUT/gputests.log" | tail -12
timeout 110 python3 -m pytest --noconftest -q -s -m gpu -p no:cacheprovider \
  tests/kernels/test_precompiled_gpu.py > "$OUT/precompiled.log" 2>&1
grep -E "H200 kernel cache|compile|passed|failed|Error" "$OUT/precompiled.log" | tail -6
left=$((total - (SECONDS - start) - 75))
echo "bench budget ${left}s"
bash kernels/device14.sh "$left" qkv,o_proj,gate_up,down,in_proj 1,2048,2,256 --no-check \
  --skip path-gemv-rot,path-mma,path-w8-int8,path-w8-fp8,path-w4a8-int8-a8 \
  --skip-prefill int4pack,path-dequant > "$OUT/dev.log" 2>&1
grep -E "M=(1|2048|2|256) (cublas|ours|int4pack|gemlite-a16w4|gemlite-a8w4|fp8|path-gemv)" "$OUT/bench14.log" | cut -c1-80
bash kernels/ncu14.sh "o_proj 1 gemv" 2>&1 | grep -v "==" | tail -12
