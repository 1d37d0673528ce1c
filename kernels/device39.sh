#!/bin/bash
# Issue 14, for the next session's H200 run (written after the eleventh pass's device time ran
# out; not run yet): (1) the GPU tests of the fifth-pass GEMV's prologues, the records kind now
# the eleventh pass's kernel (`fast_host.rotate_givens_paired(paired=False)`); (2) that GEMV at
# M = 4, 8, 16 with each prologue and the prologues alone (`bench_decode` stage 2, the shipped
# config): serve `decode_host.GEMV3_PROLOGUE = "givens"` only if it wins in the same run;
# (3) a second `--h2 gvpdl` run at M = 2 (run 3: PDL 1.05-1.12x on 4 shapes, gate_up 0.97x).
# Usage: bash kernels/device39.sh TEST_LIMIT_S BENCH_BUDGET_S
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
bash kernels/gputests14.sh "$1" tests/kernels/test_triton_fast_gpu.py -k "prologue" -rf 2>&1 | tail -8
(cd kernels && timeout $(($2 + 120)) python3 -m paro_kernels.bench_decode --stage1 "" --jobs 1 \
  --out "$OUT/gemv3-prologues.json" --shapes qkv,o_proj,gate_up,down,in_proj --ms 4,8,16 \
  --budget-s "$2" > "$OUT/bench.log" 2>&1)
(cd kernels && timeout $(($2 + 120)) python3 -m paro_kernels.bench_decode --h2 gvpdl \
  --out "$OUT/h2gvpdl.json" --shapes qkv,o_proj,gate_up,down,in_proj --ms 2 \
  --budget-s "$2" >> "$OUT/bench.log" 2>&1)
grep -vE "^(WARNING|  |gemv_h2_kernel)" "$OUT/bench.log" | grep -vE "cublas" | cut -c1-150
