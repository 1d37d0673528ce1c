"""Least-privilege container flags, shared by the .service argv and the Quadlet file.

ROCm serving needs no capability: /dev/kfd and /dev/dri/renderD* are opened through the device
cgroup and file permissions (crw-rw---- root:render), which root in the container passes as their
owner and a non-root user passes through the host's render/video groups. SYS_PTRACE is only for
debuggers and profilers (rocgdb, rocprof); it stays an explicit `container.cap_add`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from paroctl.profile.schema import Container


def engine_args(container: Container) -> list[str]:
    """podman/docker flags: every capability dropped, the profile's few added, its user."""
    args: list[str] = []
    if not container.privileged:  # --privileged grants everything: dropping caps would be a lie
        args += ["--cap-drop", "ALL"]
        for cap in container.cap_add:
            args += ["--cap-add", cap]
    if container.user:
        args += ["--user", container.user]
    return args
