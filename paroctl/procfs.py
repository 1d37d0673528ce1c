"""Reading /proc: a process's state and group, this boot's id, a process group's live members.

Linux only. The local runtime and the switch journal both recognise a process by these facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcInfo:
    """The few /proc/<pid>/stat fields that identify a process and its group."""

    pid: int
    state: str
    pgid: int
    sid: int
    start_ticks: int


def read_proc(pid: int) -> ProcInfo | None:
    """Parse /proc/<pid>/stat; None when the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm may hold spaces and parentheses; the fields after the last ')' are fixed.
    fields = raw[raw.rindex(")") + 2 :].split()
    return ProcInfo(pid, fields[0], int(fields[2]), int(fields[3]), int(fields[19]))


def alive(info: ProcInfo | None) -> bool:
    """Whether a read process still runs: a zombie (Z) or dead (X) entry holds a pid but no
    longer runs or holds a port."""
    return info is not None and info.state not in ("Z", "X")


def kernel_boot_id() -> str:
    """This boot's id: start ticks count from boot, so after a reboot they could match by chance."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is pgid."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        info = read_proc(int(entry.name))
        if alive(info) and info is not None and info.pgid == pgid:
            members.append(info.pid)
    return members
