"""The cpu image's default base, made on this host: Debian by debootstrap, then `docker import`.

Product, not test support: `paroctl image build cpu` builds FROM `local/debian:bookworm` unless
told `--base`, and a box with no registry to pull from (the CI and demo boxes) can only make it.
Idempotent, and serialised per host: two builds at once make it once.
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from paroctl import proc
from paroctl.errors import RuntimeFailure, UsageError
from paroctl.profile import checks

BASE_IMAGE = "local/debian:bookworm"
SUITE = "bookworm"
DEBOOTSTRAP_TIMEOUT_S = 1200.0


def checked_ref(ref: str) -> str:
    """A base image reference fit for a Containerfile's FROM line, or UsageError saying why (a
    line break in it would add an instruction of its own, such as a RUN, to the build)."""
    try:
        return checks.image_ref(ref)
    except ValueError as exc:
        raise UsageError(f"base image {checks.short(ref)}: {exc}") from exc


@contextlib.contextmanager
def host_lock(what: str) -> Iterator[None]:
    """Hold an exclusive lock, shared by every process on this host, around a check-then-act step
    (start dockerd, build an image): two paroctl processes (or two test workers) doing it at once
    would start two daemons that fight over containerd, or race two builds of one tag."""
    path = Path(tempfile.gettempdir()) / f"paroctl-{what}.lock"
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def image_exists(ref: str) -> bool:
    """Whether the engine holds an image of this reference."""
    return proc.run(["docker", "image", "inspect", ref], timeout=60, check=False).returncode == 0


def ensure_base_image(ref: str = BASE_IMAGE, suite: str = SUITE) -> bool:
    """Build the Debian base image (debootstrap + `docker import`) unless present; True if built."""
    if image_exists(checked_ref(ref)):
        return False
    with host_lock("image-build"):
        return _build_base_image(ref, suite)


def _build_base_image(ref: str, suite: str) -> bool:
    if image_exists(ref):
        return False
    if shutil.which("debootstrap") is None:
        raise RuntimeFailure(f"{ref} is missing and debootstrap is not installed; apt-get it")
    with tempfile.TemporaryDirectory(prefix="paroctl-rootfs-") as scratch:
        rootfs = Path(scratch) / "rootfs"
        tarball = Path(scratch) / "rootfs.tar"
        proc.run(["debootstrap", "--variant=minbase", suite, rootfs], timeout=DEBOOTSTRAP_TIMEOUT_S)
        proc.run(["tar", "-C", rootfs, "-cf", tarball, "."], timeout=600)
        # Free the rootfs before importing: both copies at once double the disk footprint.
        shutil.rmtree(rootfs)
        proc.run(["docker", "import", tarball, ref], timeout=600)
    return True
