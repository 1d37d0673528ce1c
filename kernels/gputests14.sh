#!/bin/bash
# The GPU test files in full on the H200 (xdist; the repo's tests/conftest.py needs pydantic,
# absent there, hence --noconftest and PYTHONPATH). Usage: bash kernels/gputests14.sh LIMIT_S FILES...
limit=$1; shift
root=$PWD
export PYTHONPATH=$root/kernels:$root/tests/kernels:$root/plugin:$PYTHONPATH
timeout "$limit" python3 -m pytest --noconftest -q -m gpu -p no:cacheprovider -n 16 "$@" 2>&1 | tee "$OUT/gputests.log" | tail -25
