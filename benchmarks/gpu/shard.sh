#!/bin/bash
# The whole GPU suite (every test marked gpu under tests/kernels but the precompiled-cache one,
# which `gpu_tests.sh precompiled` runs with its carried cache) in N shards, one per device call,
# so that it runs to completion within the 600 s a call allows (all cases, not a sample).
# Shard K of N takes its part of the collection as `shard_plan.py` splits it (N
# parts of about equal time by the last committed run's JUnit times, each longest first: the
# same split on every call of one tree), runs them on one worker a core under LIMIT_S, and
# writes $OUT/shardK.log and a JUnit XML.
# Usage: bash benchmarks/gpu/shard.sh K N LIMIT_S [IDS]   (K = 1..N; writes into $OUT)
# IDS: run that list of test ids (in its order) in place of the planned shard K, e.g. the ids an
# earlier shard failed or did not reach.
k=$1; n=$2; limit=$3; given=$4
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export OUT=${OUT:-$root/out}; mkdir -p "$OUT"
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH PYTHONUNBUFFERED=1
# One Triton cache in the (git-ignored) tree: a warm machine keeps ignored paths between calls, so
# the shards after the first reuse the kernels the earlier ones compiled (every shard draws
# from every test function, so most of their kernels are the same ones).
export TRITON_CACHE_DIR=$root/.triton-gpu-cache
# One intra-op thread a worker: 16 workers on the machine's 16 cores, each with torch's default
# of 16 OpenMP threads (the fp64 references run on the CPU), oversubscribe the cores 16-fold,
# and idle OpenMP threads spin, starving the workers' Triton builds. Not measured yet: the
# `cpu_s` property (_compile_stats) of the next run says whether a test's time is host work.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
files=$(ls tests/kernels/test_*_gpu.py | grep -v test_precompiled_gpu.py)
python3 -m pytest --noconftest -q -m gpu -p no:cacheprovider --collect-only $files 2>/dev/null \
  | grep "::" | sort > "$OUT/all.ids"
if [ -n "$given" ]; then
  grep -Fxf "$OUT/all.ids" "$given" > "$OUT/shard$k.ids"  # ids this tree still has, in order
else
  python3 benchmarks/gpu/shard_plan.py "$OUT/all.ids" "$k" "$n" > "$OUT/shard$k.ids" || exit 2
  python3 benchmarks/gpu/shard_plan.py "$OUT/all.ids" "$k" "$n" --simulate
fi
echo "shard $k of $n: $(wc -l < "$OUT/shard$k.ids") tests"
# -p _compile_stats (tests/kernels/_compile_stats.py): each test's Triton compiles in its JUnit
# case, to learn where a GPU test's ~30 s go (H200, 2026-12-05: a warm cache did not help).
# -p _gpu_spread (tests/kernels/_gpu_spread.py): on a machine of several GPUs, worker gwI runs on
# GPU I mod PARO_TEST_GPUS; one worker a core (16 on nvidia-h200, 32 on -x2), as the tests seem
# host-bound (every worker busy on the H200 run of 2026-12-05; the cpu_s properties say).
export PARO_TEST_GPUS=$(nvidia-smi -L | grep -c "^GPU")
# One worker a core the process may use. Not `nproc`: it honours OMP_NUM_THREADS, exported as 1
# above, and said 1 (2026-12-05: a whole shard on one worker of a 16-core machine).
cores=$(python3 -c "import os; print(len(os.sched_getaffinity(0)))")
workers=${WORKERS:-$cores}
echo "$PARO_TEST_GPUS GPUs, $workers workers"
# At the limit pytest alone gets SIGINT (--foreground: not its xdist workers, which would take
# the controller down with them), stops its workers and still writes the JUnit XML of the tests
# that finished: a shard cut by the limit keeps its results (checked on CPU with a slow suite).
mapfile -t ids < "$OUT/shard$k.ids"
timeout -s INT --foreground -k 30 "$limit" python3 -m pytest --noconftest -q -m gpu \
  -p no:cacheprovider -p _compile_stats -p _gpu_spread -n "$workers" -rf \
  --junitxml="$OUT/shard$k.xml" "${ids[@]}" \
  > "$OUT/shard$k.log" 2>&1
echo "rc $?"
tail -6 "$OUT/shard$k.log"
python3 - "$OUT/shard$k.xml" <<'EOF'
import sys, xml.etree.ElementTree as ET
cases = list(ET.parse(sys.argv[1]).getroot().iter("testcase"))
stats = [p.get("value").split(", ") for c in cases for p in c.iter("property")
         if p.get("name") == "triton_compiles"]
built = sum(int(s[1].split()[0]) for s in stats)
secs = sum(float(s[2].split()[0]) for s in stats)
cpu = [sum(float(v.split()[0]) for v in p.get("value").split(", ")) for c in cases
       for p in c.iter("property") if p.get("name") == "cpu_s"]
wall = sum(float(c.get("time")) for c in cases)
print(f"{len(cases)} tests, {wall:.0f} s of worker time, {built} kernels built in {secs:.0f} s,"
      f" {sum(cpu):.0f} s of CPU time")
EOF
