"""Run fuzz cases in a worker process under a memory limit (RLIMIT_AS) and a per-case wall time.

A case that hangs (a FIFO, an exponential `extends:` graph) or blows up (an alias bomb) fails its
test with the case named, instead of hanging CI or taking the machine's memory: the parent waits
at most CASE_TIMEOUT_S for each answer, then kills the worker and starts a fresh one.

A profile that validates must render, and its env file must read back through systemd's own
parser (tests/env_readers.py) as exactly the environment the serve is meant to get, where systemd
is its reader (runtime.engine: none): a case that breaks either fails like a crash.

Protocol: one JSON line per case in ({"dir": ..., "text": ...}), one JSON line out ({"outcome":
"refused" | "rendered"} or {"error": traceback}). Run as a script, this file is the worker.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CASE_TIMEOUT_S = 5.0
START_TIMEOUT_S = 60.0  # the worker's imports, on a busy 2-core machine
# Headroom over what the worker maps after its imports: a shipped profile loads and renders in a
# few MB; the alias bomb took > 2 GB.
MEMORY_HEADROOM = 512 << 20


class CaseFailed(AssertionError):
    """A fuzz case crashed, hung or ran out of memory in the worker."""


class Sandbox:
    """The parent side: a worker started on first use and restarted after a hang or a death."""

    def __init__(self, env: dict[str, str], timeout_s: float = CASE_TIMEOUT_S) -> None:
        self._env = env
        self._timeout_s = timeout_s
        self._proc: subprocess.Popen[str] | None = None

    def check(self, directory: Path, text: str) -> str:
        """Load (and render) `text` as a profile in the worker; return its outcome or raise."""
        return self.ask({"dir": str(directory), "text": text}, text)

    def ask(self, request: dict[str, Any], text: str = "") -> str:
        """Send one request; the answer's outcome, or CaseFailed naming the case."""
        proc = self._worker()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], self._timeout_s)
        if not ready:
            self.close()
            raise CaseFailed(f"hang: no answer within {self._timeout_s} s for {text[:300]!r}")
        line = proc.stdout.readline()
        if not line:
            code = proc.wait()
            self._proc = None
            raise CaseFailed(f"the worker died (exit {code}) on {text[:300]!r}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise CaseFailed(f"{answer['error']}\non {text[:300]!r}")
        return str(answer["outcome"])

    def close(self) -> None:
        """Stop the worker (it is started again on the next case)."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def _worker(self) -> subprocess.Popen[str]:
        if self._proc is None:
            proc = subprocess.Popen(
                [sys.executable, __file__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=self._env,
                cwd=REPO,
            )
            assert proc.stdout is not None
            # The per-case clock starts once the worker has imported paroctl and says so.
            ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
            if not ready or proc.stdout.readline() != "ready\n":
                proc.kill()
                raise CaseFailed(f"the fuzz worker did not start within {START_TIMEOUT_S} s")
            self._proc = proc
        return self._proc


# --- the worker ----------------------------------------------------------------------------------


def _limit_memory() -> None:
    import resource

    with open("/proc/self/statm") as handle:
        mapped = int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = mapped + MEMORY_HEADROOM
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _case(directory: Path, text: str) -> str:
    from env_readers import systemd_library, systemd_reads

    from paroctl.errors import ParoctlError, ProfileError
    from paroctl.profile import profiles
    from paroctl.serve import render
    from paroctl.serve.plan import ServePlan

    # The KLD reference of the paro-int5 seed: without it every such case stops at that key.
    (directory / "bf16-ref.yaml").write_text((REPO / "profiles" / "bf16-ref.yaml").read_text())
    (directory / "fuzz.yaml").write_text(text)
    try:
        prof = profiles.load("fuzz", directory)
    except ProfileError as exc:
        # Every problem names the file it is in; none is empty.
        if not exc.problems or not all(p.startswith(str(directory)) for p in exc.problems):
            return f"bad-message: {exc.problems[:3]!r}"
        return "refused"
    plan = ServePlan.of(prof)
    try:
        artefacts = render.artefacts(plan)
    except ParoctlError as exc:
        return f"bad-render: validated, then the render refused it: {exc.message[:300]}"
    if prof.uses_engine or systemd_library() is None:
        return "rendered"
    env_file = directory / "fuzz.env"
    env_file.write_text(next(a.content for a in artefacts if a.filename.endswith(".env")))
    got, wanted = systemd_reads(env_file), dict(plan.env)
    if got != wanted:
        changed = {
            k: (wanted.get(k), got.get(k)) for k in {*got, *wanted} if got.get(k) != wanted.get(k)
        }
        return f"bad-env: systemd reads the env file differently: {sorted(changed.items())[:4]!r}"
    return "rendered"


def _answer(request: dict[str, Any]) -> str:
    # Probes of the sandbox itself (its own test): a case that hangs, one that blows up.
    if request.get("probe") == "hang":
        import time

        time.sleep(3600)
    if request.get("probe") == "allocate":
        return str(len(bytearray(int(request["bytes"]))))
    return _case(Path(request["dir"]), request["text"])


def _serve() -> None:
    import traceback

    from env_readers import systemd_library

    from paroctl.serve import render  # noqa: F401  imported before the limit applies

    systemd_library()  # loaded before the limit applies too
    _limit_memory()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            outcome = _answer(request)
            answer = {"error": outcome} if outcome.startswith("bad-") else {"outcome": outcome}
        except BaseException:  # a MemoryError under the limit too: the case fails, not the worker
            answer = {"error": traceback.format_exc(limit=-8)}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve()
