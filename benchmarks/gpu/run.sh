#!/bin/bash
# One GPU run of one kernel bench, a GPU-suite tool, or Nsight Compute, from the repository root,
# writing into $OUT (the device runner's folder; default ./out). Replaces the numbered per-day
# scripts of 2026-11-29..12-06 (git keeps them; docs/notebook/ names the runs they made).
# Usage:
#   bash benchmarks/gpu/run.sh BENCH [ARGS...]     a module of benchmarks/kernels, e.g.
#       bash benchmarks/gpu/run.sh peers --out '$OUT/peers.json' --shapes qkv,gate_up --ms 1,16,2048
#       bash benchmarks/gpu/run.sh decode --h2 gvrows --out '$OUT/gvrows.json' --ms 9,16,24,32
#   bash benchmarks/gpu/run.sh suite K N LIMIT_S   shard K of N of the GPU test suite (shard.sh)
#   bash benchmarks/gpu/run.sh tests LIMIT_S FILES...   / precompiled   (gpu_tests.sh)
#   bash benchmarks/gpu/run.sh ncu CELL...         Nsight Compute summary (ncu.sh)
#   bash benchmarks/gpu/run.sh peers-step          Marlin built + checked, the peers bench at
#                                                  M = 1..64, 2048, 8192 and the whole decode
#                                                  step (peers_step.sh; carry .peers)
# BUDGET_S (env): a bench is killed at BUDGET_S + 120 s (default 540: a 600 s device call).
# GEMLITE (env): a gemlite-*.tar.gz sdist to unpack onto PYTHONPATH (GemLite peers; pure Python).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export OUT=${OUT:-$root/out}
mkdir -p "$OUT"
export PYTHONPATH=$root:$root/kernels:$root/plugin:$root/tests/kernels${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
# One Triton cache in the (git-ignored) tree: a warm machine keeps it between calls.
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$root/.triton-gpu-cache}
if [ -n "${GEMLITE:-}" ]; then
  mkdir -p /tmp/gl && tar xzf "$GEMLITE" -C /tmp/gl
  PYTHONPATH=$(echo /tmp/gl/gemlite-*):$PYTHONPATH
fi
[ $# -ge 1 ] || { sed -n 2,18p "$0"; exit 2; }
what=$1; shift
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader 2>/dev/null
case "$what" in
  suite) exec bash benchmarks/gpu/shard.sh "$@" ;;
  tests) exec bash benchmarks/gpu/gpu_tests.sh "$@" ;;
  ncu) exec bash benchmarks/gpu/ncu.sh "$@" ;;
  peers-step) exec bash benchmarks/gpu/peers_step.sh "$@" ;;
esac
[ -f "benchmarks/kernels/$what.py" ] || { echo "run.sh: no bench benchmarks/kernels/$what.py" >&2; exit 2; }
# '$OUT' in the arguments (quoted by the caller) is this run's output folder.
args=("${@//\$OUT/$OUT}")
timeout $(( ${BUDGET_S:-540} + 120 )) python3 -m "benchmarks.kernels.$what" "${args[@]}" \
  > >(tee "$OUT/$what.log") 2>&1
rc=$?
echo "$what rc $rc (log: $OUT/$what.log)"
exit $rc
