#!/bin/bash
# Issue 14 seventh pass (H200): Nsight Compute of the MXFP4 decode GEMV as served (this tree) and
# the 3d7c87d kernel at the same config (`_mx_old.py`, as device21.sh), gate_up M = 1 and 2.
# Usage: bash kernels/device23.sh
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
sec="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats"
met=sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
cd kernels
for cell in "gate_up 1 mx" "gate_up 1 mx-old paro_kernels.triton._mx_old" \
            "gate_up 2 mx" "gate_up 2 mx-old paro_kernels.triton._mx_old"; do
  echo "== $cell" >> "$OUT/ncu.csv"
  timeout 90 ncu --clock-control none --profile-from-start off --csv --page details $sec \
    python3 -m paro_kernels.profile14 $cell >> "$OUT/ncu.csv" 2>>"$OUT/ncu.err"
  timeout 90 ncu --clock-control none --profile-from-start off --csv --metrics $met \
    python3 -m paro_kernels.profile14 $cell >> "$OUT/ncu.csv" 2>>"$OUT/ncu.err"
done
grep -E '^==|"(DRAM Throughput|Registers Per Thread|Achieved Occupancy|Duration|Issue Slots Busy|Warp Cycles Per Issued Instruction)"|pipe|inst_executed|issue_active' \
  "$OUT/ncu.csv" | awk -F'","' '{print $(NF-3), "|", $(NF-1), $NF}' | cut -c1-120
tail -3 "$OUT/ncu.err"
