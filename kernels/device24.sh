#!/bin/bash
# Issue 14 eighth pass (H200), run 1: the int5 GPU tests, then the int5 decode rows on this
# tree's GEMV and on the ccbd255 kernel (copied to _dk_old.py by `git show
# ccbd255:kernels/paro_kernels/triton/decode_kernels.py`), the int5 config sweep, and the
# M = 1 / 4 cells (the peers) until the budget.
# Usage: bash kernels/device24.sh TEST_LIMIT_S BENCH_BUDGET_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
if [ "$1" -gt 0 ]; then
  bash kernels/gputests14.sh "$1" tests/kernels/test_triton_w4a8_gpu.py -k "int5 or a16_bands" \
    -rf 2>&1 | tail -6
  cp "$OUT/gputests.log" "$OUT/gputests-int5.log"
fi
timeout $(( $2 + 120 )) python3 -m paro_kernels.bench_mx_decode --out "$OUT/int5.json" --sweep "" \
  --ms 1,4 --shapes qkv,o_proj,gate_up,down,in_proj --budget-s "$2" --int5-ms 1,4,16 \
  --int5-old paro_kernels.triton._dk_old --int5-sweep > "$OUT/bench.log" 2>&1
grep -E "int5|cublas|int4pack|as served|error|Traceback" "$OUT/bench.log" | cut -c1-150 | tail -90
# Nsight Compute, qkv M = 1: the int5 op as served on this tree's GEMV and on the ccbd255 kernel
export NCU_SEC="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats"
export NCU_MET=sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
export NCU_GREP="|Issue Slots Busy|Warp Cycles Per Issued Instruction|Theoretical Occupancy|Shared Memory Configuration Size"
bash kernels/ncu14.sh "qkv 1 int5" "qkv 1 int5-old paro_kernels.triton._dk_old"
grep -E "inst_executed|issue_active" "$OUT/ncu.csv" | awk -F'","' '{print $(NF-3), "|", $(NF-1), $NF}'
tail -3 "$OUT/ncu.err"
