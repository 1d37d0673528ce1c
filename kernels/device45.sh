#!/bin/bash
# Issue 14, fifteenth pass, H200: register caps on the int4 / int5 mma GEMV. The H200 build's
# registers and stack at each cap (`aot.compile_gemv_mma(maxnreg=)`), `bench_decode --h2 mma`
# at MS4 (int4: the MMA_GRID caps against as shipped) and `--h2 mma5` at MS5 (int5: MMA5_GRID),
# every 27B shape, then `bench_mx_decode --mma` on qkv at M = 1, 4 (its cell loop on
# bench_decode's since the fourteenth pass: that refactor's first GPU run). 0 skips a step.
# Usage: bash kernels/device45.sh BUDGET4_S BUDGET5_S MX_BUDGET_S [MS4] [MS5]
ms4=${4:-9,16}
ms5=${5:-1,4,16}
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
python3 - <<'PY'
import triton
from paro_kernels.triton import aot
for hi in (False, True):
    for m, caps in ((4, (0, 64, 56, 48)), (16, (0, 80, 72, 64))):
        for cap in caps:
            rep, c = aot.compile_gemv_mma("sm90", m, 17408, 5120, 128, (8704,), hi=hi, maxnreg=cap)
            u = aot.cubin_usage(c)
            print("triton", triton.__version__, "int5" if hi else "int4", "M", m, "cap", cap,
                  "REG", u["REG"], "STACK", u.get("STACK"))
PY
cd kernels
run() {  # name budget args...
  local name=$1 budget=$2; shift 2
  [ "$budget" = 0 ] && return
  timeout $((budget + 120)) python3 -m "$@" --out "$OUT/$name.json" --budget-s "$budget" \
    > "$OUT/$name.log" 2>&1
  echo "== $name rc $?"
  grep -vE "^(WARNING|  |gemv_mma_kernel|mx_gemv)" "$OUT/$name.log" | grep -v cublas | cut -c1-150 | tail -3
}
run mma4 "$1" paro_kernels.bench_decode --h2 mma --shapes qkv,gate_up,down,o_proj,in_proj --ms "$ms4"
run mma5 "$2" paro_kernels.bench_decode --h2 mma5 --shapes qkv,gate_up,down,o_proj,in_proj --ms "$ms5"
run mx "$3" paro_kernels.bench_mx_decode --mma --mma-grid 1 --shapes qkv --ms 1,4
