"""Shared fixtures: an isolated PAROCTL_HOME per test, the --update-golden flag."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import pytest

try:
    from paroctl.profile import knobs
except ImportError:  # a GPU box carrying only torch + Triton: the kernel tests need no paroctl
    knobs = None  # type: ignore[assignment]

REPO = Path(__file__).resolve().parents[1]
# GSM8K and WikiText-2, copied into the repository (tests/data/README.md): no test depends on a
# directory beside the checkout or on the internet.
TEST_DATA = REPO / "tests" / "data"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="Rewrite tests/golden from the current renderer (review the diff).",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(scope="session")
def script() -> Callable[[str], ModuleType]:
    """A repository script that is no package module (images/doctor.py, which image builds copy
    in; kernels/gpushard_plan.py), loaded as a module by its path under the repository."""

    def load(relpath: str) -> ModuleType:
        path = REPO / relpath
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


def _mount_tmpfs(directory: Path, size: str, note: str = "") -> None:
    """Mount a fresh tmpfs of `size` on the existing `directory` (mode 0700): a real disk that
    fills. Where this machine refuses (not root, no CAP_SYS_ADMIN), skip the test naming why and
    the missing part (`note`: what still covers the case). The caller unmounts."""
    why = "not root" if os.geteuid() != 0 else ""
    if not why:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(directory)],
            capture_output=True,
            text=True,
            check=False,
        )
        why = "" if done.returncode == 0 else done.stderr.strip() or f"mount exit {done.returncode}"
    if why:
        pytest.skip(f"cannot mount a tmpfs here ({why}): needs root with CAP_SYS_ADMIN{note}")


@pytest.fixture(scope="session")
def mount_tmpfs() -> Callable[..., None]:
    """`_mount_tmpfs`: a real disk that fills, for the full-disk cases."""
    return _mount_tmpfs


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own PAROCTL_HOME; nothing leaks into the user's real one."""
    home = tmp_path / "home"
    monkeypatch.setenv("PAROCTL_HOME", str(home))
    monkeypatch.setenv("PAROCTL_DATA_DIR", str(TEST_DATA))
    for name in (
        "PAROCTL_PROFILES_DIR",
        "PAROCTL_KNOB_REGISTRY",
        "PAROCTL_UNIT_DIR",
        "PAROCTL_VLLM_ENVS",
    ):
        monkeypatch.delenv(name, raising=False)
    _clear_knob_caches()
    yield home
    _clear_knob_caches()


def _clear_knob_caches() -> None:
    if knobs is not None:
        knobs.load_registry.cache_clear()
        knobs.vllm_env_names.cache_clear()


@pytest.fixture
def fixed_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed PAROCTL_HOME / PAROCTL_CACHE so rendered artefacts are byte-stable (golden files)."""
    monkeypatch.setenv("PAROCTL_HOME", "/var/lib/paroctl")
    monkeypatch.setenv("PAROCTL_CACHE", "/var/cache/paroctl")


@pytest.fixture
def profile_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch profiles directory holding copies of the shipped bases, selected for loading."""
    directory = tmp_path / "profiles"
    directory.mkdir()
    for base in (REPO / "profiles").glob("_*.yaml"):
        (directory / base.name).write_text(base.read_text())
    monkeypatch.setenv("PAROCTL_PROFILES_DIR", str(directory))
    return directory


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    def _expired(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def deadline() -> Callable[[float], AbstractContextManager[None]]:
    """`with deadline(5): ...` fails the test (TimeoutError) instead of letting a hang hang CI."""
    return _deadline


# --- the parallel run (tests/run.sh: pytest -n 2 --no-loadscope-reorder) ------------------------
# A group is the unit of work: its tests run in order on one worker and share its module and
# session fixtures. Every module that boots a vLLM serve (or a container of one) is in one group,
# "serves", so a single worker runs them one after another: two serves booting at once on the
# 2-core box hung a worker process's start for the whole 300 s boot timeout (measured in a
# parallel run on 2026-12-01: three rollback boots failed that way), and the systemd container
# and the session's CPU serve are built once. The other worker runs every other module (kernel
# interpreter and AOT builds, fuzzing, renders: ~8 of the serial run's 55 min) beside it.
SHARED_GROUPS = (
    ("tests/e2e/", "serves"),
    ("tests/systemd/", "serves"),
    ("tests/images/test_cpu_image_e2e.py", "serves"),
    ("tests/images/test_podman_socket_e2e.py", "serves"),
    ("tests/plugin/", "plugin"),
)
# The serves first: they are the critical path; the rest fills the other worker.
HEAVY_FIRST = ("serves",)


def work_group(nodeid: str) -> str:
    """The group of a test: its shared group, else its module."""
    module = nodeid.split("::", 1)[0]
    return next((name for prefix, name in SHARED_GROUPS if module.startswith(prefix)), module)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The heavy groups first (a stable sort: the order within a group is kept)."""
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(work_group(item.nodeid), len(rank)))


# One intra-op thread for torch in a worker (in-process only: torch.set_num_threads does not reach
# the vLLM serves the tests start). Two workers on the 2-core box, each with torch's default of 2
# OpenMP threads, oversubscribe the cores beside the serves, and a parallel region waits for all
# its threads: measured 2026-12-05 on the 2-core AVX2 EPYC (tests/kernels/bench_host_threads.py),
# a GPU test's CPU part took 1.84 s an iteration in each of two processes at 2 threads against
# 0.63-0.72 s at 1 (0.47 s at 2 threads alone). The suite's wall time did not move measurably
# (2167 s against 2131 s: the vLLM serves, which this leaves alone, are the critical path).
_ONE_THREAD: list[bool] = [False]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if not _ONE_THREAD[0] and "PYTEST_XDIST_WORKER" in os.environ and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
        _ONE_THREAD[0] = True


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scope scheduler with work_group as the scope (its loadgroup marker does not group
    under pytest 9.2, which no longer reads the node id it rewrites)."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return work_group(nodeid)

    return GroupScheduling(config, log)


# --- per-module wall times (CI prints them: tests/run.sh) ----------------------------------------
# Summed from the reports (setup + call + teardown, module fixtures included), which reach the
# controlling process under xdist too; the worker that ran the module is shown beside it.

_MODULE_S: dict[str, float] = {}
_MODULE_WORKER: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::", 1)[0]
    _MODULE_S[module] = _MODULE_S.get(module, 0.0) + report.duration
    node = getattr(report, "node", None)
    if node is not None:
        _MODULE_WORKER[module] = str(node.gateway.id)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Per-module wall times, slowest first, and their total (and per worker)."""
    if not _MODULE_S:
        return
    terminalreporter.section("wall time per module")
    for module, seconds in sorted(_MODULE_S.items(), key=lambda kv: -kv[1]):
        worker = _MODULE_WORKER.get(module, "")
        terminalreporter.write_line(f"{seconds:8.1f} s  {worker:4} {module}")
    terminalreporter.write_line(f"{sum(_MODULE_S.values()):8.1f} s  total")
    for worker in sorted(set(_MODULE_WORKER.values())):
        busy = sum(s for m, s in _MODULE_S.items() if _MODULE_WORKER.get(m) == worker)
        terminalreporter.write_line(f"{busy:8.1f} s  on {worker}")
