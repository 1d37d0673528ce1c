#!/bin/bash
# Issue 17 part 2 on the H200: the sm_90 kernel cache built on CPU (kernels/precompile_h200.py,
# Triton 3.6 = the H200's) carried as .kc17/sm90, then used by tests/kernels/test_precompiled_gpu.py
# (zero JIT compiles required). If the keys do not match (another Triton build there), the same
# walk rebuilds the first plan's cache here (compile-only stand-in: CPU compiles, no launches)
# and the test runs again on it.
# Usage: bash kernels/gputests17.sh   (writes $OUT/gpu17*.log)
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
export PRECOMPILE_CACHE=$root/.kc17 PRECOMPILE_PLAN=$root/tests/kernels/data/precompile_h200_plan.json
t=(python3 -m pytest --noconftest -q -s -m gpu -p no:cacheprovider tests/kernels/test_precompiled_gpu.py)
python3 -c "import triton, torch; print('triton', triton.__version__, triton.__file__, 'torch', torch.__version__)"
python3 -c "from paro_kernels.triton import precompile as p; print('this triton_key', p.triton_key_sha())"
grep '"triton' .kc17/sm90/paro-manifest.json
echo "== carried cache (built on CPU, 3.6 cp311 + the cp312 libtriton hash)"
timeout 150 "${t[@]}" > "$OUT/gpu17.log" 2>&1; rc=$?
grep -v "Warn\|warn" "$OUT/gpu17.log" | tail -8
if [ $rc -ne 0 ]; then
  echo "== fallback: the same walk here (stand-in driver: CPU compiles), then the test again"
  export PRECOMPILE_PLAN=$root/tests/kernels/data/precompile_h200_plan_fallback.json
  timeout 100 python3 kernels/precompile_h200.py --plan "$PRECOMPILE_PLAN" \
    --out /tmp/kc17/sm90 > "$OUT/gpu17-build.log" 2>&1; tail -1 "$OUT/gpu17-build.log"
  PRECOMPILE_CACHE=/tmp/kc17 timeout 80 "${t[@]}" > "$OUT/gpu17b.log" 2>&1
  grep -v "Warn\|warn" "$OUT/gpu17b.log" | tail -8
fi
