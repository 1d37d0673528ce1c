#!/bin/bash
# Issue 14, twenty-third pass: what this pass built without a device, in one call.
# 1. The GPU tests it touched: the MXFP4 module (the decode chunks served at M = 17..32, the
#    dispatch through `served_act`) and the W4A8 bands test (M = 200: fp8 on the 8-bit route).
# 2. The decode chunks timed as served against the paths they replace (`bench_mx_decode
#    --prefill` at M = 17..64: as served, the GEMM, the dequant path, the chunks and the 8-bit
#    route forced; cuBLAS and int4 as served in the same run). Keep MMA_CHUNK_MAX_M by it.
# 3. The mid band's launch configs (`device51.sh`).
# Usage: bash kernels/device52.sh TEST_LIMIT_S BENCH_BUDGET_S SWEEP_BUDGET_S   (0 skips a step)
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=$root/.triton-gpu-cache
if [ "$1" != 0 ]; then
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 timeout "$1" python3 -m pytest --noconftest -q -m gpu \
    -p no:cacheprovider -n 16 -rf --junitxml="$OUT/gputests52.xml" \
    tests/kernels/test_triton_mx_gpu.py "tests/kernels/test_triton_w4a8_gpu.py::test_a16_bands_serve_w4a8" \
    > "$OUT/gputests52.log" 2>&1
  echo "tests rc $?"
  grep -E "passed|failed|FAILED|Error" "$OUT/gputests52.log" | tail -12
fi
[ "$2" != 0 ] && EXTRA="" bash kernels/device47.sh 0 "$2" 16,17,24,32,40,48,64
[ "$3" != 0 ] && bash kernels/device51.sh "$3"
