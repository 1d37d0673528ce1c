"""A box of stand-in serves on the real LocalRuntime: two profiles on one port under one served
name (as the shipped alias `Qwen3.8` is on every variant), switched by the real switch.

The stand-in replaces vLLM (a real one boots in minutes; these tests need two of them and many
switches): it answers what the switch's verification asks (/health, /v1/models, /load, the
profile's " cold" sanity completion) and what the gates ask (chat and text completions), slowly
enough that a gate is still running when a test signals or switches, and it labels every answer
with the profile that started it and counts what it received, so a test can tell whose answers a
run stored and whether a stopped gate kept sending.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import standin_serve

from paroctl import net
from paroctl.profile import profiles
from paroctl.serve.runtime import ServeSpec
from paroctl.serve.runtime.local import LocalRuntime
from paroctl.switch import switch
from paroctl.switch.record import Deps

REPO = Path(__file__).resolve().parents[2]


class StandinRuntime(LocalRuntime):
    """The local runtime, starting tests/standin_serve.py (labelled with the profile) in the place
    of vLLM."""

    delay_s = 0.2

    def start(self, spec: ServeSpec) -> None:
        """Start the stand-in with the spec's port, served name, dtype and environment."""
        options = ("--label", spec.name, "--delay", str(self.delay_s))
        standin = standin_serve.command(spec.argv, spec.port, *options)
        super().start(dataclasses.replace(spec, argv=standin))


@dataclass
class StandinBox:
    """Profiles `cpu-demo` and `cpu-demo-b` on one port and served name, and a real switch."""

    port: int
    profile_dir: Path

    def switch(self, name: str) -> None:
        """Make a profile live through the real switch protocol (stand-ins for vLLM)."""
        deps = Deps(runtime_for=lambda kind, scope: StandinRuntime())
        switch.switch(profiles.load(name), deps, load_profile=profiles.load)

    def counts(self) -> dict[str, int]:
        """What the serve on the port received and answered (gate requests only)."""
        url = f"http://127.0.0.1:{self.port}/counts"
        with urllib.request.urlopen(url, timeout=5) as reply:
            return dict(json.loads(reply.read()))

    def wait_answered(self, at_least: int, timeout_s: float = 60.0) -> dict[str, int]:
        """Poll /counts until the serve has answered at_least gate requests."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            try:
                seen = self.counts()
            except OSError:
                seen = {"answered": 0}
            if seen["answered"] >= at_least:
                return seen
            time.sleep(0.05)
        raise TimeoutError(f"the stand-in answered fewer than {at_least} in {timeout_s} s")


@pytest.fixture
def standin_box(
    profile_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[StandinBox]:
    """Two stand-in profiles on one port; anything they left running is stopped afterwards."""
    monkeypatch.setenv("PAROCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PAROCTL_CPU_FLAGS", "avx2")
    # Promotion switches through default_deps(): the same stand-in in the place of vLLM.
    monkeypatch.setattr(switch, "default_runtime", lambda kind, scope: StandinRuntime())
    port = net.free_port()
    text = (REPO / "profiles" / "cpu-demo.yaml").read_text() + f"serve:\n  port: {port}\n"
    (profile_dir / "cpu-demo.yaml").write_text(text)
    (profile_dir / "cpu-demo-b.yaml").write_text(text)
    try:
        yield StandinBox(port, profile_dir)
    finally:
        for name in ("cpu-demo", "cpu-demo-b"):
            LocalRuntime().stop(name, grace_s=1)


@pytest.fixture
def gate_process(tmp_path: Path) -> Callable[..., object]:
    """Start `paroctl ARGS` as its own process (signals reach it as they reach an operator's)."""
    import subprocess

    def start(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "paroctl", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )

    return start
