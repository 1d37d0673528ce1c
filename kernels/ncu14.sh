#!/bin/bash
# Nsight Compute summary of the decode and prefill goal cells, before (tile kernels) and after.
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$PYTHONPATH
cd kernels
sec="--section SpeedOfLight --section Occupancy --section LaunchStats"
for cell in "gate_up 1 mma" "gate_up 1 gemv" "qkv 2048 mma" "qkv 2048 dequant" "qkv 2048 mma int8"; do
  tag=$(echo $cell | tr ' ' '_')
  timeout 60 ncu --clock-control none --profile-from-start off --csv --page details $sec \
    python3 -m paro_kernels.profile14 $cell > "$OUT/ncu_$tag.csv" 2>"$OUT/ncu_$tag.err"
  timeout 60 ncu --clock-control none --profile-from-start off --csv \
    --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active \
    python3 -m paro_kernels.profile14 $cell >> "$OUT/ncu_$tag.csv" 2>>"$OUT/ncu_$tag.err"
done
cat "$OUT"/ncu_*.csv | grep -E '"(DRAM Throughput|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Duration)"|pipe' | cut -c1-400 | head -80
