"""The real parsers of a rendered env file, for tests: systemd's, podman's and Kubernetes'.

- systemd: `load_env_file()` from the libsystemd-shared library that systemd itself links (the
  function EnvironmentFile= runs, systemd 252 here), called through ctypes, then the check PID 1
  makes before exec (`env_assignment_is_valid`: an assignment it fails is dropped). PID 1 is not
  systemd on these machines, so no unit can be started here; the parser is the same code.
- podman: `podman create --env-file` of an empty image (no container runs), read back with
  `podman inspect`. One create per batch of files.
- Kubernetes: a manifest's env values are YAML strings in which `$$` is one `$`.
"""

from __future__ import annotations

import ctypes
import glob
import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import Any

EMPTY_IMAGE = "localhost/paroctl-envcheck:empty"
_LIBRARY_GLOBS = (
    "/usr/lib/*/systemd/libsystemd-shared-*.so",
    "/usr/lib/systemd/libsystemd-shared-*.so",
    "/lib/systemd/libsystemd-shared-*.so",
)


@cache
def systemd_library() -> Any:
    """libsystemd-shared, with the two functions typed; None where systemd is not installed."""
    found = sorted(p for pattern in _LIBRARY_GLOBS for p in glob.glob(pattern))
    if not found:
        return None
    lib = ctypes.CDLL(found[-1])
    lib.load_env_file.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.POINTER(ctypes.c_char_p)),
    ]
    lib.load_env_file.restype = ctypes.c_int
    lib.env_assignment_is_valid.argtypes = [ctypes.c_char_p]
    lib.env_assignment_is_valid.restype = ctypes.c_bool
    lib.strv_free.argtypes = [ctypes.c_void_p]
    lib.strv_free.restype = ctypes.c_void_p
    return lib


def systemd_reads(path: Path) -> dict[str, str]:
    """What a unit's process gets from `EnvironmentFile=path` (later assignments win)."""
    lib = systemd_library()
    assert lib is not None, "systemd's libsystemd-shared is not installed"
    out = ctypes.POINTER(ctypes.c_char_p)()
    code = lib.load_env_file(None, str(path).encode(), ctypes.byref(out))
    assert code == 0, f"load_env_file({path}) failed: errno {-code}"
    env: dict[str, str] = {}
    if not out:  # a file with no assignment gives no list at all
        return env
    try:
        index = 0
        while out[index] is not None:
            raw = out[index]
            if lib.env_assignment_is_valid(raw):
                key, _, value = raw.decode().partition("=")
                env[key] = value
            index += 1
    finally:
        lib.strv_free(out)
    return env


def podman_available() -> bool:
    """Whether the podman CLI is on PATH."""
    return shutil.which("podman") is not None


def ensure_empty_image() -> None:
    """An image with nothing in it: `podman create` needs one, and nothing ever runs."""
    known = subprocess.run(
        ["podman", "image", "exists", EMPTY_IMAGE], capture_output=True, check=False, timeout=60
    )
    if known.returncode == 0:
        return
    with tempfile.TemporaryDirectory() as scratch:
        tar = Path(scratch) / "empty.tar"
        subprocess.run(["tar", "-cf", str(tar), "-T", "/dev/null"], check=True, timeout=60)
        subprocess.run(
            ["podman", "import", "-q", str(tar), EMPTY_IMAGE],
            capture_output=True, check=True, timeout=120,
        )  # fmt: skip


def podman_reads(paths: Sequence[Path]) -> list[dict[str, str]]:
    """The environment `podman run --env-file P` gives a container, for each file P."""
    ensure_empty_image()
    return [_podman_env(path) for path in paths]


def _podman_env(path: Path) -> dict[str, str]:
    created = subprocess.run(
        ["podman", "create", "--env-file", str(path), EMPTY_IMAGE, "/none"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    cid = created.stdout.strip().splitlines()[-1]
    try:
        shown = subprocess.run(
            ["podman", "inspect", "--format", "{{json .Config.Env}}", cid],
            capture_output=True, text=True, check=True, timeout=120,
        )  # fmt: skip
    finally:
        subprocess.run(["podman", "rm", "-f", cid], capture_output=True, check=False, timeout=120)
    return dict(item.partition("=")[::2] for item in json.loads(shown.stdout))


def kubernetes_env(documents: Iterator[Any]) -> list[tuple[str, str]]:
    """The literal env values of every container in a manifest stream, as the pod sees them."""
    found: list[tuple[str, str]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("env"), list):
                found.extend(
                    (e["name"], e["value"].replace("$$", "$")) for e in node["env"] if "value" in e
                )
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for doc in documents:
        walk(doc)
    return found
