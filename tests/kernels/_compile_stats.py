"""pytest plugin for the GPU suite (`benchmarks/gpu/shard.sh` loads it with `-p _compile_stats`):
each test's Triton compiles, counted and timed, as JUnit properties of its test case.

Why: the whole GPU suite on the H200 (2026-12-05) took 1347 s of device time for 671 tests (about 30
s of a busy worker a test, 0.4-202 s), and the second shard, run on the warm machine with the first
shard's Triton cache in place, took as long as the first. So either each shard compiles its own
kernel specializations (the cache cannot help) or compiling is not where a test's time goes. These
properties say which, per test, at no extra device time: `triton_compiles` (calls, kernels built,
seconds in the compiler) and `cpu_s` (the test's CPU time, its own and its children's).

`triton.compiler.compile` is the one entry the JIT calls for every kernel it builds (it looks
in the on-disk cache itself, so a cache hit is counted too, and takes milliseconds); the JIT
imports it from `triton.compiler` at a kernel's first launch (Triton 3.9; a Triton that binds it
in `triton.runtime.jit` at import gets it there too), so the wrapper is installed at configure
time, before any test module is imported. Whether a call built the kernel or read the cache is
what Triton's compilation listener (`triton.knobs.compilation.listener`, its `cache_hit`) says;
a Triton without that knob falls back to the call's time (CI once saw a tiny sm_90 kernel build
in under 50 ms, so the time alone is not a reliable sign).
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from typing import Any

import pytest

# Without a compilation listener: a compile that took longer than this built the kernel.
BUILT_S = 0.05
_now: dict[str, float] = {"calls": 0, "built": 0, "seconds": 0.0}
_listening: list[bool] = [False]
# CPU seconds (this process; its waited-for children, such as ptxas) at the test's setup:
# a test whose CPU time is near its wall time was busy on the host (compiling, references), one
# far below it waited (on the GPU, or on the other workers' share of the cores).
_cpu0: list[float] = [0.0, 0.0]


def _cpu() -> list[float]:
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return [own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime]


def _counted(compile_fn: Callable[..., Any]) -> Callable[..., Any]:
    def compile(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return compile_fn(*args, **kwargs)
        finally:
            took = time.perf_counter() - start
            _now["calls"] += 1
            _now["built"] += not _listening[0] and took > BUILT_S
            _now["seconds"] += took

    compile.__wrapped__ = compile_fn  # type: ignore[attr-defined]
    return compile


def pytest_configure(config: pytest.Config) -> None:
    import triton.compiler
    import triton.runtime.jit as jit

    if not hasattr(triton.compiler.compile, "__wrapped__"):
        triton.compiler.compile = _counted(triton.compiler.compile)
    if hasattr(jit, "compile"):  # a Triton that imports it at module level binds it there
        jit.compile = triton.compiler.compile
    knobs = getattr(triton, "knobs", None)
    compilation = getattr(knobs, "compilation", None)
    if compilation is not None and hasattr(compilation, "listener"):
        chained = compilation.listener

        def listener(**kwargs: Any) -> None:
            _now["built"] += not kwargs.get("cache_hit", True)
            if chained is not None:
                chained(**kwargs)

        compilation.listener = listener
        _listening[0] = True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _now.update(calls=0, built=0, seconds=0.0)
    _cpu0[:] = _cpu()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    # JUnit writes the properties of the teardown report (xdist ships them as they are: a str)
    if call.when == "teardown":
        stats = f"{_now['calls']:.0f} calls, {_now['built']:.0f} built, {_now['seconds']:.2f} s"
        item.user_properties.append(("triton_compiles", stats))
        own, kids = (b - a for a, b in zip(_cpu0, _cpu(), strict=True))
        item.user_properties.append(("cpu_s", f"{own:.2f} own, {kids:.2f} children"))
