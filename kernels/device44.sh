#!/bin/bash
# Issue 14, fourteenth pass, H200, run 4 (the final dispatch): the mma GEMV's registers and
# stack as the H200's Triton builds it (every band, bf16 rows), the MXFP4 GPU file in full, then
# `bench_mx_decode --mma --mma-grid GRID` on every 27B shape at MS (as served against the paths
# before, int4 as served, cuBLAS; the first GRID configs of the GEMV alone).
# Run 5 (MXFP4-PARO on the Givens records): TESTS (-k) and SHAPES narrow both steps.
# Usage: bash kernels/device44.sh TEST_LIMIT_S BUDGET_S [MS] [GRID] [TESTS] [SHAPES]
ms=${3:-1,2,4,8,9,16}
grid=${4:-1}
tests=${5:-}
shapes=${6:-qkv,gate_up,down,o_proj,in_proj}
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
python3 - <<'PY'
import pathlib, re, subprocess, tempfile, triton
from paro_kernels.triton import aot
tool = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
for m in (1, 4, 16):
    rep, c = aot.compile_mx_gemv_mma("sm90", m, 17408, 5120, (8704,), 1)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(c.asm["cubin"]); f.flush()
        u = subprocess.run([str(tool), "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    print("triton", triton.__version__, "M", m, rep.config, re.findall(r"(REG:\d+|STACK:\d+)", u))
PY
if [ "$1" != 0 ]; then
  bash kernels/gputests14.sh "$1" tests/kernels/test_triton_mx_gpu.py -rf ${tests:+-k "$tests"} \
    2>&1 | grep -v arn | tail -4
fi
if [ "$2" != 0 ]; then
  (cd kernels && timeout $(($2 + 120)) python3 -m paro_kernels.bench_mx_decode --mma \
    --mma-grid "$grid" --out "$OUT/mma.json" --shapes "$shapes" \
    --ms "$ms" --budget-s "$2" > "$OUT/bench.log" 2>&1)
  grep -vE "^(WARNING|  )" "$OUT/bench.log" | grep -v "cublas" | cut -c1-100 | tail -120
fi
