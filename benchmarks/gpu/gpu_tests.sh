#!/bin/bash
# GPU test files outside the sharded suite, from the repository root, into $OUT.
#   bash benchmarks/gpu/gpu_tests.sh LIMIT_S FILES...   the files in full (xdist, one worker a core)
#   bash benchmarks/gpu/gpu_tests.sh precompiled        the kernel cache built on a CPU machine
#       (benchmarks/gpu/precompile_check.py, the GPU box's Triton) carried as .kc/sm90, then used
#       by tests/kernels/test_precompiled_gpu.py (zero JIT compiles required). If the keys do not
#       match (another Triton build there), the same walk rebuilds the fallback plan's cache here
#       (compile-only stand-in: CPU compiles, no launches) and the test runs again on it.
# The repo's tests/conftest.py needs pydantic, absent on the GPU box: hence --noconftest.
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export OUT=${OUT:-$root/out}; mkdir -p "$OUT"
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
if [ "$1" != precompiled ]; then
  limit=$1; shift
  cores=$(python3 -c "import os; print(len(os.sched_getaffinity(0)))")
  timeout "$limit" python3 -m pytest --noconftest -q -m gpu -p no:cacheprovider -n "$cores" "$@" \
    2>&1 | tee "$OUT/gpu_tests.log" | tail -25
  exit "${PIPESTATUS[0]}"
fi
export PRECOMPILE_CACHE=$root/.kc PRECOMPILE_PLAN=$root/tests/kernels/data/precompile_h200_plan.json
t=(python3 -m pytest --noconftest -q -s -m gpu -p no:cacheprovider tests/kernels/test_precompiled_gpu.py)
python3 -c "import triton, torch; print('triton', triton.__version__, triton.__file__, 'torch', torch.__version__)"
python3 -c "from paro_kernels.triton import precompile as p; print('this triton_key', p.triton_key_sha())"
grep '"triton' .kc/sm90/paro-manifest.json
echo "== carried cache (built on CPU)"
timeout 150 "${t[@]}" > "$OUT/precompiled.log" 2>&1; rc=$?
grep -v "Warn\|warn" "$OUT/precompiled.log" | tail -8
if [ $rc -ne 0 ]; then
  echo "== fallback: the same walk here (stand-in driver: CPU compiles), then the test again"
  export PRECOMPILE_PLAN=$root/tests/kernels/data/precompile_h200_plan_fallback.json
  timeout 100 python3 benchmarks/gpu/precompile_check.py --plan "$PRECOMPILE_PLAN" \
    --out /tmp/kc/sm90 > "$OUT/precompiled-build.log" 2>&1; tail -1 "$OUT/precompiled-build.log"
  PRECOMPILE_CACHE=/tmp/kc timeout 80 "${t[@]}" > "$OUT/precompiled-b.log" 2>&1; rc=$?
  grep -v "Warn\|warn" "$OUT/precompiled-b.log" | tail -8
fi
exit $rc
