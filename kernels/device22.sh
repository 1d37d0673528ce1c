#!/bin/bash
# Issue 14 seventh pass (H200): GPU test files in full on the final tree, each under its own
# limit, each file's log in $OUT. Usage: bash kernels/device22.sh NAME:LIMIT_S [NAME:LIMIT_S ...]
# NAME: fast | gpu | w4a8 | mx (tests/kernels/test_triton_NAME_gpu.py; gpu = test_triton_gpu.py)
# or precompiled (tests/kernels/test_precompiled_gpu.py).
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
for f in "$@"; do
  t0=$SECONDS; n=${f%%:*}; lim=${f#*:}
  case $n in
    gpu) file=tests/kernels/test_triton_gpu.py ;;
    precompiled) file=tests/kernels/test_precompiled_gpu.py ;;
    *) file=tests/kernels/test_triton_${n}_gpu.py ;;
  esac
  if [ "$n" = precompiled ]; then
    timeout "$lim" python3 -m pytest --noconftest -q -s -m gpu -p no:cacheprovider "$file" \
      > "$OUT/gpu-$n.log" 2>&1
  else
    bash kernels/gputests14.sh "$lim" "$file" -rf > /dev/null 2>&1
    mv "$OUT/gputests.log" "$OUT/gpu-$n.log"
  fi
  echo "== $n: $((SECONDS - t0)) s (limit $lim)"
  grep -E "H200 kernel cache|passed|failed|FAILED|Error" "$OUT/gpu-$n.log" | tail -8
done
