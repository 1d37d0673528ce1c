#!/bin/bash
# Issue 14, fifteenth pass, H200: deliverable 4's one bench run on the final tree. Every format
# as served (`host.linear` W4A16, W4A8 int8 / fp8, int5 I8 PG ZPE, NVFP4 -> MXFP4, MXFP4-PARO)
# against cuBLAS bf16, `torch._weight_int4pack_mm`, GemLite A16W4 / A8W4 (autotune pinned:
# kernels/gemlite-h200.json, written back to $OUT) and fp8 `torch._scaled_mm`, with the measured
# copy bandwidth (`bench14`; the per-path variants skipped: the passes' own benches time them).
# GemLite 0.6.0.post2's sdist (pure Python) travels in .whl/ (carry it) and is unpacked here.
# Usage: bash kernels/device46.sh BUDGET_S SHAPES [MS]
budget=$1 shapes=$2 ms=${3:-1,2,4,8,16,64,256,2048,8192}
root=$PWD
mkdir -p /tmp/gl && tar xzf "$root"/.whl/gemlite-*.tar.gz -C /tmp/gl
export PYTHONPATH=$(echo /tmp/gl/gemlite-*):$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
skip=path-w4a8-int8-a8,path-gemv-blocks,path-mma,path-w8-fp8,path-w8-int8,path-dequant
# Two calls in one command write two files: a second bench14.json would overwrite the first
# (2026-12-05: one run's 8B prefill cells lost so), so a later call takes bench14-2.json, ...
tag=""; i=1
while [ -e "$OUT/bench14$tag.json" ]; do i=$((i + 1)); tag="-$i"; done
cd kernels
timeout $((budget + 150)) python3 -m paro_kernels.bench14 --out "$OUT/bench14$tag.json" \
  --shapes "$shapes" --ms "$ms" --budget-s "$budget" --no-check --skip "$skip" \
  --gemlite-config "$root/kernels/gemlite-h200.json" > "$OUT/bench14$tag.log" 2>&1
echo "rc $? ($OUT/bench14$tag.json)"
cp "$root/kernels/gemlite-h200.json" "$OUT/"
grep -E "^\S+ M=\S+ (ours|cublas|int4pack|gemlite|fp8)" "$OUT/bench14$tag.log" | grep -E "M=(1|16|2048) " \
  | cut -c1-90 | tail -60
grep -iE "error|not_run" "$OUT/bench14$tag.log" | sort | uniq -c | head -5
