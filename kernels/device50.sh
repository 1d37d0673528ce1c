#!/bin/bash
# Issue 14, twenty-second pass: the measurements the next dispatch changes need (the 27B TP=2
# shapes, same run per cell, carrying nothing).
# 1. int4's mid band: at M = 64..512 every int4 route forced (`bench14`'s path variants: the
#    tile kernels `path-mma`, the bf16 dequant path `path-dequant`, the W4A8 fp8 8-bit route
#    `path-w8-fp8`) and the formats as served, against cuBLAS bf16: where `fast_host.W8_MIN_M`
#    (256, the fourth pass's guess below 2048) and `DEQUANT_MIN_M` (256) really cross.
# 2. MXFP4 below M = 64 (`device49.sh` at 16..48): whether the 8-bit route (`mx_host.W8_MIN_M`
#    = 64 from the twenty-second pass) also beats the MXFP4 GEMM there.
# Usage: bash kernels/device50.sh BUDGET_INT4_S BUDGET_MX_S   (0 skips a step)
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
if [ "$1" != 0 ]; then
  skip=ours-w4a8-int8,ours-int5,ours-mxfp4,ours-mxfp4-paro,int4pack,gemlite-a16w4,gemlite-a8w4
  skip=$skip,path-w8-int8,path-w4a8-int8-a8,path-gemv-blocks
  (cd kernels && timeout $(($1 + 120)) python3 -m paro_kernels.bench14 \
    --out "$OUT/bench14-int4-mid.json" --shapes qkv,o_proj,gate_up,down,in_proj \
    --ms 64,96,128,192,256,384,512 --budget-s "$1" --no-check --skip "$skip" \
    > "$OUT/bench14-int4-mid.log" 2>&1)
  echo "int4 rc $?"
  grep -E "^\S+ M=\S+ (ours|cublas|path|fp8)" "$OUT/bench14-int4-mid.log" | cut -c1-90 | tail -120
fi
if [ "$2" != 0 ]; then
  bash kernels/device49.sh 0 "$2" 16,24,32,48 | grep -E "as served|gemm:|w8:|cublas"
fi
