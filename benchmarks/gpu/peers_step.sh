#!/bin/bash
# One GPU call: Marlin beside our kernels, and the whole decode step, from the repository root,
# writing into $OUT (default ./out). Carry `.peers` (Marlin's source in .peers/marlin).
#   1. Marlin's two builds from .peers/marlin (benchmarks/kernels/marlin.py: "marlin-nohint" for
#      M <= 64, "marlin" as published for prefill), while 16 processes fill Triton's cache for
#      the peers cells (which hold the step's M too); then each build's fp32 check in its own
#      process (a kernel fault ends only that process's CUDA context);
#   2. the whole decode step (benchmarks/kernels/step.py) at M = 1, 4, 8, 16: every format, bf16
#      and Marlin (formats in priority order: a budget cuts int5 first);
#   3. the peers bench (benchmarks/kernels/peers.py) at M = 1..64, 2048, 8192 on the 27B TP=2
#      shapes, every format as served beside Marlin, int4pack, cuBLAS bf16, fp8 _scaled_mm, in
#      M order 1, 4, 16, 8, 32, 64, 2048, 8192, 2 until the time left (a build whose check failed
#      is left out of its band: the check's JSON says why).
# Files in $OUT: peers_step.log, marlin-check-nohint.json, marlin-check-stock.json, step.json,
# peers.json (each JSON written as it goes: a cut run still returns its cells).
# Budget (H100): builds || precompile ~90 s, checks ~20 s, step <= STEP_S (default 170 s; one
# format past it at most), peers what is left before DEADLINE_S (default 540 s: a 600 s device
# call), its cells stopping 40 s before. Usage: bash benchmarks/gpu/run.sh peers-step
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export OUT=${OUT:-$root/out}
mkdir -p "$OUT"
export PYTHONPATH=$root:$root/kernels:$root/plugin:$root/tests/kernels${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$root/.triton-gpu-cache}
export TORCH_CUDA_ARCH_LIST=9.0
export MAX_JOBS=${MAX_JOBS:-4}
deadline=${DEADLINE_S:-540}
step_s=${STEP_S:-170}
exec > >(tee -a "$OUT/peers_step.log") 2>&1
left() { echo $(( deadline - SECONDS )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
nvcc --version | tail -1
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
shapes=qkv,o_proj,gate_up,down,in_proj
ms=1,4,16,8,32,64,2048,8192,2
skip="gemlite-*,path-*"  # GemLite is not installed there; the forced paths are another bench's

echo "== marlin builds || Triton precompile ($SECONDS s)"
timeout 240 python3 -m benchmarks.kernels.marlin --build marlin-nohint & b1=$!
timeout 240 python3 -m benchmarks.kernels.marlin --build marlin & b2=$!
timeout 240 python3 -m benchmarks.kernels.peers --out "$OUT/peers.json" --shapes $shapes \
  --ms $ms --m-major --no-check --skip "$skip" --precompile 14 --precompile-only \
  --precompile-s 180 & pc=$!
wait $b1; rc_b1=$?
wait $b2; rc_b2=$?
echo "marlin build rc: nohint $rc_b1, published $rc_b2 ($SECONDS s)"
wait $pc
echo "precompile rc $? ($SECONDS s)"

echo "== marlin checks ($SECONDS s)"
timeout 120 python3 -m benchmarks.kernels.marlin --check marlin-nohint \
  --out "$OUT/marlin-check-nohint.json" & c1=$!
timeout 120 python3 -m benchmarks.kernels.marlin --check marlin \
  --out "$OUT/marlin-check-stock.json" & c2=$!
wait $c1; rc_c1=$?
wait $c2; rc_c2=$?
echo "marlin check rc: nohint $rc_c1, published $rc_c2 (0 ok, 1 a cell failed, else crashed)"
skip_prefill=""  # a build whose check failed (or crashed) is not run in its band
skip_decode=""
step_formats="bf16,marlin,w4a16,w4a8-int8,w4a8-fp8,mxfp4,mxfp4-paro,int5"
if [ "$rc_c1" -ne 0 ]; then
  skip_decode="marlin"
  step_formats=${step_formats/marlin,/}
fi
[ "$rc_c2" -eq 0 ] || skip_prefill="marlin"

echo "== step ($SECONDS s; formats $step_formats)"
budget=$(( step_s < $(left) - 200 ? step_s : $(left) - 200 ))
budget=$(( budget > 10 ? budget : 10 ))
timeout $(( budget + 90 )) python3 -m benchmarks.kernels.step --out "$OUT/step.json" \
  --ms 1,4,8,16 --formats "$step_formats" --reps 10 --budget-s $budget
echo "step rc $? ($SECONDS s)"

echo "== peers ($SECONDS s; skip $skip; at decode '$skip_decode', at prefill '$skip_prefill')"
budget=$(( $(left) - 40 ))
timeout $(( $(left) > 20 ? $(left) : 20 )) python3 -m benchmarks.kernels.peers \
  --out "$OUT/peers.json" --shapes $shapes --ms $ms --m-major --reps 20 --no-check \
  --budget-s $(( budget > 10 ? budget : 10 )) --skip "$skip" --skip-prefill "$skip_prefill" \
  --skip-decode "$skip_decode"
echo "peers rc $? ($SECONDS s)"
ls -la "$OUT"
