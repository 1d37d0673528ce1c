#!/bin/bash
# Issue 14 tenth pass (H200), run 5: the rotation inside the HFMA2 GEMV with the waits polling
# relaxed + nanosleep (`_h2_wait(POLL)`, at commit f518475; removed after this run: no gain), M = 1
# on every 27B shape (`bench_decode --h2 rot` at f518475),
# then Nsight Compute on gate_up M = 1: the prologue op's two kernels against the one launch.
# Usage: bash kernels/device32.sh BENCH_BUDGET_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
(cd kernels && timeout $(($1 + 120)) python3 -m paro_kernels.bench_decode --h2 rot --out "$OUT/h2rot.json" \
  --shapes qkv,o_proj,gate_up,down,in_proj --ms 1 --budget-s "$1" > "$OUT/bench.log" 2>&1)
grep -vE "^(WARNING|  |gemv_h2_kernel)" "$OUT/bench.log" | grep -vE "cublas|int4pack" | cut -c1-150
NCU_SEC="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats" \
  NCU_GREP="|Warp Cycles Per Issued Instruction|Avg. Active Threads Per Warp" \
  bash kernels/ncu14.sh "gate_up 1 gemv-h2" "gate_up 1 gemv-h2-rot"
