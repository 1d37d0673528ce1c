#!/bin/bash
# Issue 14, eleventh pass, H200, run 3 (the records prologue served): `device37.sh` with the GPU
# tests -k "h2 or a16_bands" and `bench_decode --h2 gvpdl` (2 warps, PDL with either prologue,
# the two prologues alone). Usage: bash kernels/device38.sh TEST_LIMIT_S BENCH_BUDGET_S
exec bash kernels/device37.sh "$1" "$2" gvpdl "h2 or a16_bands"
