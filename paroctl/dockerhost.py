"""Test-box support: make a Docker engine usable on this host (tools, daemon) and build the
images the tests run in (the systemd image, podman's copies).

Nothing here pulls from a registry (these machines cannot): the Debian base image is the
product's (image/base.py: debootstrap and `docker import`), and every other image is built on
top of it. Every step is idempotent, so tests and CI call these before each use.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from paroctl import env, proc, state
from paroctl.errors import RuntimeFailure
from paroctl.image.base import BASE_IMAGE, ensure_base_image
from paroctl.image.base import host_lock as _host_lock
from paroctl.image.base import image_exists as image_exists

SYSTEMD_IMAGE = "local/paroctl-systemd:1"

APT_PACKAGES = {"docker": "docker.io", "dockerd": "docker.io", "debootstrap": "debootstrap"}
APT_TIMEOUT_S = 900.0
DAEMON_TIMEOUT_S = 60.0
BUILD_TIMEOUT_S = 1800.0

# What a systemd container needs on top of the base, and the units that cannot work inside one
# (no devices to manage, no consoles, no seats) and would only leave the system "degraded".
SYSTEMD_PACKAGES = ("systemd", "systemd-sysv", "dbus", "python3")
SYSTEMD_MASKS = (
    "systemd-udevd.service",
    "systemd-udev-trigger.service",
    "getty.target",
    "console-getty.service",
    "systemd-logind.service",
)
# Shared libraries a host interpreter bind-mounted from outside (pyenv builds link these) and
# vLLM on CPU (libnuma) load; the minbase image lacks most of them.
SERVE_LIBS = (
    "libnuma1",
    "libgomp1",
    "libstdc++6",
    "libssl3",
    "libffi8",
    "libsqlite3-0",
    "libbz2-1.0",
    "liblzma5",
    "zlib1g",
    "libreadline8",
    "libncursesw6",
    "libuuid1",
    "libexpat1",
)


def is_root() -> bool:
    """Whether we may install packages and start daemons."""
    return os.geteuid() == 0


def missing_tools(tools: Sequence[str] = tuple(APT_PACKAGES)) -> list[str]:
    """The tools in tools that are not on PATH."""
    return [tool for tool in tools if shutil.which(tool) is None]


def ensure_tools(tools: Sequence[str] = tuple(APT_PACKAGES)) -> list[str]:
    """Install missing docker/dockerd/debootstrap with apt; return the packages installed."""
    missing = missing_tools(tools)
    if not missing:
        return []
    packages = sorted({APT_PACKAGES.get(tool, tool) for tool in missing})
    if not is_root():
        raise RuntimeFailure(
            f"missing {', '.join(missing)}; install them first: "
            f"sudo apt-get install -y {' '.join(packages)}"
        )
    env = _env(DEBIAN_FRONTEND="noninteractive")
    proc.run(["apt-get", "update", "-qq"], timeout=APT_TIMEOUT_S, env=env)
    proc.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
        timeout=APT_TIMEOUT_S,
        env=env,
    )
    return packages


def engine_ready() -> bool:
    """Whether `docker info` reaches a daemon right now."""
    return proc.run(["docker", "info"], timeout=30, check=False).returncode == 0


def ensure_engine(log_path: Path | None = None, timeout_s: float = DAEMON_TIMEOUT_S) -> bool:
    """Make `docker info` work, starting dockerd in the background if needed; True if started."""
    if engine_ready():
        return False
    with _host_lock("dockerd"):
        return _start_engine(log_path, timeout_s)


def _start_engine(log_path: Path | None, timeout_s: float) -> bool:
    if engine_ready():  # another process started it while this one waited for the lock
        return False
    if not is_root() or shutil.which("dockerd") is None:
        raise RuntimeFailure(
            "no Docker engine answers `docker info`; start one (as root: `dockerd &`) "
            "or set DOCKER_HOST"
        )
    log = log_path if log_path is not None else state.home() / "logs" / "dockerd.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    # A detached daemon outlives this process; the shell only redirects and backgrounds it, and
    # its own session keeps the operator's Ctrl-C away from it. The log path is an argument, not
    # spliced into the script.
    proc.run(
        ["sh", "-c", 'setsid dockerd >>"$1" 2>&1 </dev/null &', "sh", str(log)],
        timeout=30,
    )
    deadline = time.monotonic() + timeout_s
    while not engine_ready():
        if time.monotonic() >= deadline:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
            raise RuntimeFailure(
                f"dockerd did not answer `docker info` within {timeout_s:g} s; "
                f"its log {log}:\n{tail}"
            )
        time.sleep(0.5)
    return True


def systemd_containerfile(base: str = BASE_IMAGE, extra: Sequence[str] = SERVE_LIBS) -> str:
    """The Containerfile of an image whose PID 1 is systemd (ENVIRONMENT.md's recipe)."""
    packages = " ".join((*SYSTEMD_PACKAGES, *extra))
    masks = " ".join(SYSTEMD_MASKS)
    return (
        f"FROM {base}\n"
        "RUN apt-get update \\\n"
        f" && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {packages}"
        " \\\n"
        " && rm -rf /var/lib/apt/lists/* \\\n"
        f" && systemctl mask {masks}\n"
        # systemd's own "halt" signal: `docker stop` then shuts the units down cleanly.
        "STOPSIGNAL SIGRTMIN+3\n"
        'CMD ["/lib/systemd/systemd"]\n'
    )


def build_image(ref: str, containerfile: str, timeout_s: float = BUILD_TIMEOUT_S) -> None:
    """Build ref from a Containerfile text with an empty context (legacy builder)."""
    with tempfile.TemporaryDirectory(prefix="paroctl-build-") as context:
        (Path(context) / "Containerfile").write_text(containerfile)
        # No buildx on these machines: ask for the legacy builder instead of failing on it.
        proc.run(
            ["docker", "build", "-t", ref, "-f", Path(context) / "Containerfile", context],
            timeout=timeout_s,
            env=_env(DOCKER_BUILDKIT="0"),
        )


def ensure_systemd_image(
    ref: str = SYSTEMD_IMAGE, base: str = BASE_IMAGE, extra: Sequence[str] = SERVE_LIBS
) -> bool:
    """Build the systemd image (and its base) unless present; True if anything was built."""
    built = ensure_base_image(base)
    if image_exists(ref):
        return built
    with _host_lock("image-build"):
        if image_exists(ref):
            return built
        build_image(ref, systemd_containerfile(base, extra))
    return True


def ensure_docker(log_path: Path | None = None) -> None:
    """Tools installed, daemon answering: the whole precondition of every docker call."""
    ensure_tools()
    ensure_engine(log_path)


def _env(**overrides: str) -> dict[str, str]:
    child = dict(env.environ())
    child.update(overrides)
    return child


# --- podman's Docker-compatible API socket -------------------------------------------------------

# Podman asks for nofile 1048576, above these VMs' hard limit of 20000 (`error setting rlimit
# type 7`); ENVIRONMENT.md's recipe caps it in a containers.conf. Its default runtime crun 1.8.1
# refuses this VM's hybrid cgroups ("cgroups in hybrid mode not supported", 2026-12-01); runc
# (installed with docker.io) runs the same containers.
PODMAN_CONF = (
    "[containers]\n"
    'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n'
    "[engine]\n"
    'runtime = "runc"\n'
)


def podman_env(conf: Path) -> dict[str, str]:
    """The environment of every podman call: the ulimit containers.conf written first."""
    state.atomic_write(conf, PODMAN_CONF)
    return _env(CONTAINERS_CONF=str(conf))


def start_podman_service(socket: Path, timeout_s: float = DAEMON_TIMEOUT_S) -> tuple[str, int]:
    """Start `podman system service` on socket (detached); return its DOCKER_HOST url and pid."""
    if shutil.which("podman") is None:
        raise RuntimeFailure("podman is not installed: apt-get install podman")
    socket.parent.mkdir(parents=True, exist_ok=True)
    socket.unlink(missing_ok=True)
    url = f"unix://{socket}"
    log = socket.with_suffix(".log")
    started = proc.run(
        ["sh", "-c", 'setsid podman system service --time=0 "$1" >>"$2" 2>&1 </dev/null & echo $!',
         "sh", url, str(log)],
        timeout=30,
        env=podman_env(socket.with_name("containers.conf")),
    )  # fmt: skip
    pid = int(started.stdout.strip())
    deadline = time.monotonic() + timeout_s
    while not socket.exists():
        if time.monotonic() >= deadline:
            raise RuntimeFailure(
                f"podman system service made no {socket} in {timeout_s:g} s: {log}"
            )
        time.sleep(0.2)
    return url, pid


def copy_image_to_podman(ref: str, conf: Path) -> bool:
    """`docker save | podman load` one image unless podman holds the same id; True if copied."""
    env = podman_env(conf)
    fmt = ["--format", "{{.Id}}"]
    there = proc.run(["podman", "image", "inspect", *fmt, ref], timeout=60, check=False, env=env)
    here = proc.run(["docker", "image", "inspect", *fmt, ref], timeout=60)
    if there.returncode == 0 and there.stdout.strip() and there.stdout.strip() in here.stdout:
        return False
    with tempfile.TemporaryDirectory(prefix="paroctl-save-") as scratch:
        tarball = Path(scratch) / "image.tar"
        proc.run(["docker", "save", "--output", tarball, ref], timeout=600)
        proc.run(["podman", "load", "--input", tarball], timeout=600, env=env)
    return True
