#!/bin/bash
# Issue 14 seventh pass (H200): Nsight Compute of the MXFP4 decode GEMV as served (this tree) and
# the 3d7c87d kernel at the same config (`_mx_old.py`, as device21.sh), gate_up M = 1 and 2.
# Usage: bash kernels/device23.sh
export NCU_SEC="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats"
export NCU_MET=sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
export NCU_GREP="|Issue Slots Busy|Warp Cycles Per Issued Instruction|Theoretical Occupancy"
old=paro_kernels.triton._mx_old
bash kernels/ncu14.sh "gate_up 1 mx" "gate_up 1 mx-old $old" "gate_up 2 mx" "gate_up 2 mx-old $old"
grep -E "inst_executed|issue_active" "$OUT/ncu.csv" | awk -F'","' '{print $(NF-3), "|", $(NF-1), $NF}'
tail -3 "$OUT/ncu.err"
