#!/bin/bash
# Issue 14, fifteenth pass, H200: the cells run 2's bench14 budget cut (down / in_proj at M = 2,
# 4, 8, 64, 256; gate_up at 64, 256), then the Qwen3-8B TP=1 shapes (goal cells first), on the
# final dispatch (MXFP4 prefill on the dequant path from M = 65). Same script as run 2.
# Usage: bash kernels/device48.sh BUDGET_A_S BUDGET_8B_S
bash kernels/device46.sh "$1" down,in_proj 2,4,8,64,256 > /dev/null 2>&1
mv "$OUT/bench14.json" "$OUT/bench14-a.json"; mv "$OUT/bench14.log" "$OUT/bench14-a.log"
bash kernels/device46.sh 20 gate_up 64,256 > /dev/null 2>&1
mv "$OUT/bench14.json" "$OUT/bench14-b.json"; mv "$OUT/bench14.log" "$OUT/bench14-b.log"
bash kernels/device46.sh "$2" 8b-qkv,8b-o_proj,8b-gate_up,8b-down 1,16,2048,8192,2,4,8,64,256
