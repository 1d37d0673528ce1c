"""Shared fixtures: an isolated PAROCTL_HOME per test, the --update-golden flag."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from types import FrameType

import pytest

try:
    from paroctl import knobs
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


# --- per-module wall times (CI prints them: tests/run.sh, issue 19) --------------------------------

_MODULE_S: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Time each test with its setup and teardown (module fixtures included) under its module."""
    start = time.monotonic()
    yield
    module = item.nodeid.split("::", 1)[0]
    _MODULE_S[module] = _MODULE_S.get(module, 0.0) + time.monotonic() - start


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Per-module wall times, slowest first, and their total."""
    if not _MODULE_S:
        return
    terminalreporter.section("wall time per module")
    for module, seconds in sorted(_MODULE_S.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{seconds:8.1f} s  {module}")
    terminalreporter.write_line(f"{sum(_MODULE_S.values()):8.1f} s  total")
