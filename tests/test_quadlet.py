"""Quadlet files through the real generator: Debian trixie's quadlet (podman 5.4.2, fetched by
tests/fetch-quadlet.sh; Debian 12's podman 4.3.1 predates Quadlet) converts every shipped engine
profile's `.container`, and the generated `.service` runs the same container as the plain one.

The generator's flag order varies between runs (seen in 5.4.2 and 5.8.6): the tests compare
argument groups, never bytes.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from paroctl.profile import profiles
from paroctl.serve import engine, render
from paroctl.serve.plan import ServePlan

FETCH = Path(__file__).resolve().parent / "fetch-quadlet.sh"
UPSTREAM = "5.4.2"  # tests/fetch-quadlet.sh pins the Debian build of this release
ENGINE_PROFILES = [n for n in profiles.list_names() if profiles.load(n).uses_engine]
# podman run options the generator or paroctl emit, by whether they take a value; an option
# outside both fails the parse, so a new one is looked at, not silently skipped.
VALUED = {
    "--name", "--cidfile", "--cgroups", "--sdnotify", "--device", "--volume", "--publish",
    "--label", "--env-file", "--env", "--group-add", "--security-opt", "--ipc", "--shm-size",
    "--cap-drop", "--cap-add", "--user", "--stop-timeout",
}  # fmt: skip
SWITCHES = {"--replace", "--rm", "-d", "--privileged"}
ALIASES = {"-v": "--volume", "-p": "--publish", "-e": "--env", "-l": "--label"}
# The groups both units must agree on (as multisets: order is the generator's business).
GROUPS = (
    "--device", "--group-add", "--env-file", "--env", "--publish", "--volume", "--security-opt",
    "--ipc", "--shm-size", "--cap-drop", "--cap-add", "--user",
)  # fmt: skip
# Normalized spellings: the generator writes `--security-opt=no-new-privileges`.
SECURITY = {"no-new-privileges", "no-new-privileges=true"}
FIXED_HOME, FIXED_CACHE = "/var/lib/paroctl", "/var/cache/paroctl"  # conftest's fixed_paths


@dataclass(frozen=True)
class PodmanRun:
    """A parsed `podman run` command line: its option groups, the image, the serve argv."""

    binary: str
    options: dict[str, list[str]]
    image: str
    argv: list[str]


def parse_run(line: str) -> PodmanRun:
    """Split an ExecStart= value of `podman run ...` into option groups, image and argv."""
    words = shlex.split(line)
    binary, verb, rest = words[0], words[1], words[2:]
    assert verb == "run", line
    options: dict[str, list[str]] = {}
    while rest and rest[0].startswith("-"):
        word = rest.pop(0)
        name, eq, value = word.partition("=")
        name = ALIASES.get(name, name)
        if name in SWITCHES and not eq:
            options.setdefault(name, []).append("")
            continue
        assert name in VALUED, f"unknown podman run option {word!r} in {line!r}"
        options.setdefault(name, []).append(value if eq else rest.pop(0))
    if "--security-opt" in options:
        options["--security-opt"] = [
            "no-new-privileges" if v in SECURITY else v for v in options["--security-opt"]
        ]
    return PodmanRun(binary, options, rest[0], rest[1:])


@dataclass(frozen=True)
class Generated:
    """One quadlet -dryrun: its exit status, stderr, and the generated units by name."""

    returncode: int
    stderr: str
    units: dict[str, str]

    def warnings(self) -> list[str]:
        """stderr lines other than the generator's per-file progress line."""
        return [
            line
            for line in self.stderr.splitlines()
            if line.strip() and not re.search(r"Loading source unit file ", line)
        ]


def generate(quadlet: Path, unit_dir: Path) -> Generated:
    """Run the real generator in dry-run mode over every file in unit_dir."""
    done = subprocess.run(
        [str(quadlet), "-dryrun", "-no-kmsg-log"],
        env={**os.environ, "QUADLET_UNIT_DIRS": str(unit_dir)},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    parts = re.split(r"^---(\S+)---$", done.stdout, flags=re.M)
    return Generated(done.returncode, done.stderr, dict(zip(parts[1::2], parts[2::2], strict=True)))


def service_values(text: str, key: str) -> list[str]:
    """Every value of key in the [Service] section of a unit."""
    section, found = "", []
    for line in text.splitlines():
        if line.startswith("["):
            section = line
        elif section == "[Service]" and line.startswith(f"{key}="):
            found.append(line.split("=", 1)[1])
    return found


def verify(unit: str, text: str, root: Path, stub: str) -> subprocess.CompletedProcess[str]:
    """`systemd-analyze verify` in an alternate root holding the unit, systemd's units, a stub
    podman at stub (verify only checks that it is executable) and host copies of the other
    binaries the unit executes (never the host's podman: that is 4.3.1, or absent)."""
    podman = engine.ENGINE_PATHS["podman"]
    stub_path = root / stub.lstrip("/")
    stub_path.parent.mkdir(parents=True, exist_ok=True)
    stub_path.write_text("#!/bin/sh\nexit 0\n")
    stub_path.chmod(stub_path.stat().st_mode | stat.S_IXUSR)
    system = root / "etc/systemd/system"
    system.mkdir(parents=True, exist_ok=True)
    if not (root / "usr/lib/systemd/system").exists():
        shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    for key in ("ExecStartPre", "ExecStart", "ExecStop", "ExecStopPost"):
        for value in service_values(text, key):
            binary = shlex.split(value.lstrip("-@:+!"))[0]
            target = root / binary.lstrip("/")
            if binary != podman and not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(binary, target)
    (system / unit).write_text(text)
    return subprocess.run(
        ["systemd-analyze", "verify", f"--root={root}", str(system / unit)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def quadlet() -> Path:
    """The pinned generator, fetched once into PAROCTL_CACHE (tests/run.sh does it first)."""
    done = subprocess.run(
        ["bash", str(FETCH)], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"{FETCH} failed:\n{done.stderr}"
    path = Path(done.stdout.splitlines()[-1])
    version = subprocess.run([str(path), "-version"], capture_output=True, text=True, check=True)
    assert version.stdout.split()[-1] == UPSTREAM, version.stdout
    print(f"\nquadlet {path.parent.parent.parent.parent.name}: {version.stdout.strip()}")
    return path


@pytest.fixture(scope="module")
def generated(quadlet: Path, tmp_path_factory: pytest.TempPathFactory) -> Generated:
    """Every shipped engine profile's `.container`, converted in one generator run."""
    unit_dir = tmp_path_factory.mktemp("quadlet")
    with pytest.MonkeyPatch.context() as patch:
        # The same fixed homes as the tests' fixed_paths: both renders must name the same paths.
        patch.setenv("PAROCTL_HOME", FIXED_HOME)
        patch.setenv("PAROCTL_CACHE", FIXED_CACHE)
        for name in ENGINE_PROFILES:
            prof = profiles.load(name)
            (unit_dir / render.unit_filename(prof, "quadlet")).write_text(
                render.render(prof, "quadlet").content
            )
    return generate(quadlet, unit_dir)


def test_every_engine_profile_converts_without_warnings(generated: Generated) -> None:
    assert ENGINE_PROFILES, "no shipped profile runs in a container"
    assert generated.returncode == 0, generated.stderr
    assert generated.warnings() == []
    wanted = {f"{profiles.load(n).unit_name}.service" for n in ENGINE_PROFILES}
    assert set(generated.units) == wanted


@pytest.mark.usefixtures("fixed_paths")
@pytest.mark.parametrize("name", ENGINE_PROFILES)
def test_generated_service_runs_the_plain_services_container(
    name: str, generated: Generated
) -> None:
    prof = profiles.load(name)
    (exec_start,) = service_values(generated.units[f"{prof.unit_name}.service"], "ExecStart")
    got = parse_run(exec_start)
    (plain_start,) = service_values(render.render(prof, "service").content, "ExecStart")
    plain = parse_run(plain_start)
    assert got.binary == engine.ENGINE_PATHS["podman"]
    assert got.options["--name"] == [prof.unit_name]
    for group in GROUPS:
        assert Counter(got.options.get(group, [])) == Counter(plain.options.get(group, [])), group
    # Groups that are never empty, pinned to their source, so two empty lists cannot agree.
    plan = ServePlan.of(prof)
    where = plan.layout
    assert got.options["--env-file"] == [where.env_file]
    assert got.options["--publish"] == [engine.publish_spec(prof)]
    assert Counter(got.options.get("--device", [])) == Counter(prof.body.container.devices)
    assert len(got.options["--volume"]) == 2
    # The labels `status`/`adopt` and the k8s pins read back: exactly the profile and its hash.
    labels = [f"paroctl.profile={prof.name}", f"paroctl.profile-hash={prof.hash}"]
    assert Counter(got.options["--label"]) == Counter(plain.options["--label"]) == Counter(labels)
    assert got.image == plain.image == prof.body.image.ref  # type: ignore[union-attr]
    assert got.argv == plain.argv == list(plan.argv)


@pytest.mark.parametrize("name", ENGINE_PROFILES)
def test_generated_service_passes_systemd_analyze_verify(
    name: str, generated: Generated, tmp_path: Path
) -> None:
    prof = profiles.load(name)
    unit = f"{prof.unit_name}.service"
    done = verify(unit, generated.units[unit], tmp_path, engine.ENGINE_PATHS["podman"])
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


@pytest.mark.parametrize("name", ENGINE_PROFILES)
def test_generated_service_stops_with_the_plain_services_grace(
    name: str, generated: Generated
) -> None:
    # Before: no StopTimeout=, so podman's 10 s default killed a serve the .service gives 30 s.
    prof = profiles.load(name)
    text = generated.units[f"{prof.unit_name}.service"]
    (exec_start,) = service_values(text, "ExecStart")
    grace = prof.body.container.stop_grace_s
    assert parse_run(exec_start).options["--stop-timeout"] == [str(grace)]
    (plain_stop,) = service_values(render.render(prof, "service").content, "ExecStop")
    assert shlex.split(plain_stop)[1:4] == ["stop", "--time", str(grace)]
    # systemd waits longer than podman does, so podman's own kill comes first.
    (timeout,) = service_values(text, "TimeoutStopSec")
    assert int(timeout) > grace


def test_a_bad_key_fails_the_generator(quadlet: Path, tmp_path: Path) -> None:
    prof = profiles.load(ENGINE_PROFILES[0])
    text = render.render(prof, "quadlet").content.replace("\nAddDevice=", "\nAddDevices=", 1)
    assert "\nAddDevices=" in text
    (tmp_path / render.unit_filename(prof, "quadlet")).write_text(text)
    bad = generate(quadlet, tmp_path)
    assert bad.returncode == 1
    assert "unsupported key 'AddDevices' in group 'Container'" in bad.stderr


def test_a_bad_service_key_fails_verify(generated: Generated, tmp_path: Path) -> None:
    prof = profiles.load(ENGINE_PROFILES[0])
    unit = f"{prof.unit_name}.service"
    text = generated.units[unit].replace("\nTimeoutStopSec=", "\nTimeoutStopSecs=", 1)
    done = verify(unit, text, tmp_path, engine.ENGINE_PATHS["podman"])
    assert "Unknown key 'TimeoutStopSecs' in section [Service]" in done.stderr


def test_verify_needs_the_binary_the_generator_wrote(generated: Generated, tmp_path: Path) -> None:
    # The stub must sit at the generator's podman path: elsewhere, verify fails.
    prof = profiles.load(ENGINE_PROFILES[0])
    unit = f"{prof.unit_name}.service"
    done = verify(unit, generated.units[unit], tmp_path, "/opt/elsewhere/podman")
    assert done.returncode == 1
    assert "Command /usr/bin/podman is not executable" in done.stderr
