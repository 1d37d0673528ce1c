#!/bin/bash
# Nsight Compute summary (one CSV, $OUT/ncu.csv) of decode and prefill cells:
#   bash benchmarks/gpu/ncu.sh CELL...   (each "shape M path [arg]": benchmarks.kernels.ncu's argv); NCU_SEC / NCU_MET override the
# sections and metrics, NCU_GREP the extra row names kept in the summary.
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export OUT=${OUT:-$root/out}; mkdir -p "$OUT"
export PYTHONPATH=$root:$root/kernels:$root/tests/kernels:$PYTHONPATH
sec=${NCU_SEC:-"--section SpeedOfLight --section Occupancy --section LaunchStats"}
met=${NCU_MET:-sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active}
for cell in "$@"; do
  echo "== $cell" >> "$OUT/ncu.csv"
  timeout 60 ncu --clock-control none --profile-from-start off --csv --page details $sec \
    python3 -m benchmarks.kernels.ncu $cell >> "$OUT/ncu.csv" 2>>"$OUT/ncu.err"
  timeout 60 ncu --clock-control none --profile-from-start off --csv --metrics $met \
    python3 -m benchmarks.kernels.ncu $cell >> "$OUT/ncu.csv" 2>>"$OUT/ncu.err"
done
grep -E '^==|"(DRAM Throughput|Registers Per Thread|Achieved Occupancy|Duration'"${NCU_GREP:-}"')"|pipe' "$OUT/ncu.csv" | awk -F'","' '{print $5, "|", $(NF-1), $NF}' | cut -c1-120
