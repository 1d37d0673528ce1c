#!/bin/bash
# Nsight Compute summary (one CSV) of the decode and prefill goal cells: bash kernels/ncu14.sh
# CELL... (each "shape M path [arg]", profile14's argv); NCU_SEC / NCU_MET override the
# sections and metrics, NCU_GREP the extra row names kept in the summary.
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$PYTHONPATH
cd kernels
sec=${NCU_SEC:-"--section SpeedOfLight --section Occupancy --section LaunchStats"}
met=${NCU_MET:-sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active}
for cell in "$@"; do
  echo "== $cell" >> "$OUT/ncu.csv"
  timeout 60 ncu --clock-control none --profile-from-start off --csv --page details $sec \
    python3 -m paro_kernels.profile14 $cell >> "$OUT/ncu.csv" 2>>"$OUT/ncu.err"
  timeout 60 ncu --clock-control none --profile-from-start off --csv --metrics $met \
    python3 -m paro_kernels.profile14 $cell >> "$OUT/ncu.csv" 2>>"$OUT/ncu.err"
done
grep -E '^==|"(DRAM Throughput|Registers Per Thread|Achieved Occupancy|Duration'"${NCU_GREP:-}"')"|pipe' "$OUT/ncu.csv" | awk -F'","' '{print $5, "|", $(NF-1), $NF}' | cut -c1-120
