#!/bin/bash
# Issue 14, sixteenth pass, H200: the two MXFP4 prefill forms built (and checked on CPU) without
# a GPU. `device47.sh` with their GPU tests (the 8-bit route against fp64 and the GEMM's fp8
# mode, graph capture; the folded rotated dequant at every launch config; the served routes
# around them), then `bench_mx_decode --prefill` at MS: as served, the GEMM, the dequant path
# and the 8-bit route forced (its output against the GEMM's), the per-block and folded rotated
# dequant (path and kernel alone), `dequant8` alone; cuBLAS and int4 as served in the same run.
# Flip mx_host.W8 / DEQUANT_FOLD (and W8_MIN_M) by what it says. 0 skips a step.
# Usage: bash kernels/device49.sh TEST_LIMIT_S BUDGET_S [MS]
EXTRA="" exec bash kernels/device47.sh "$1" "$2" "${3:-256,2048,8192,128}" \
  "dequant or w8_route or paro_merged or custom_op or mxfp4_linear"
