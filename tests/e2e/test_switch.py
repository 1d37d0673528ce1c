"""The switch protocol against real vLLM CPU serves (local runtime): A -> B -> A, rollbacks,
SIGKILL mid-boot, two switches at once, stop. Tests run in order and share one box (home)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
import requests

from paroctl import net, state
from paroctl.client import Client
from paroctl.errors import StateError
from paroctl.events import Event
from paroctl.profile import profiles
from paroctl.records import BootRecord
from paroctl.serve import cpu, modelinfo
from paroctl.serve.plan import ServePlan
from paroctl.serve.runtime.local import LocalRuntime
from paroctl.switch import switch as switch_mod

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DRAINED_TOKENS = 48


@pytest.fixture(scope="module")
def box(
    tmp_path_factory: pytest.TempPathFactory,
    demo_parts: object,
    stop_box: Callable[[dict[str, str], Iterable[str]], None],
    cpu_box_profiles: Callable[[Path, Iterable[str]], int],
) -> Iterator[dict[str, str]]:
    """One PAROCTL_HOME and profiles dir for the whole module; the CPU profiles on a free port."""
    root = tmp_path_factory.mktemp("switch-box")
    prof_dir = root / "profiles"
    port = cpu_box_profiles(prof_dir, ("cpu-demo", "cpu-demo-alt"))
    (prof_dir / "cpu-badarg.yaml").write_text(
        "description: vLLM refuses an unknown flag and exits\nextends: _cpu\n"
        "model: {path: SmolLM2-135M-Instruct, served_names: [smollm2-bad]}\n"
        "serve: {extra_args: ['--no-such-flag']}\n"
    )
    (prof_dir / "cpu-forbid.yaml").write_text(
        "description: boots fine but logs a forbidden line\nextends: _cpu\n"
        "model: {path: SmolLM2-135M-Instruct, served_names: [smollm2-forbid]}\n"
        "boot: {forbid: ['Starting to load model']}\n"
    )
    env = {
        "PAROCTL_HOME": str(root / "home"),
        "PAROCTL_PROFILES_DIR": str(prof_dir),
        "port": str(port),
    }
    yield env
    stop_box(
        {k: v for k, v in env.items() if k != "port"},
        ("cpu-demo", "cpu-demo-alt", "cpu-badarg", "cpu-forbid"),
    )


@pytest.fixture(autouse=True)
def on_box(box: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAROCTL_HOME", box["PAROCTL_HOME"])
    monkeypatch.setenv("PAROCTL_PROFILES_DIR", box["PAROCTL_PROFILES_DIR"])


def do_switch(name: str, events: list[Event] | None = None) -> BootRecord:
    sink = events.append if events is not None else (lambda e: None)
    return switch_mod.switch(
        profiles.load(name), switch_mod.default_deps(sink), load_profile=profiles.load
    )


def answering(port: str) -> list[str]:
    with Client(f"http://127.0.0.1:{port}", retries=0) as client:
        return client.models()


def test_a_then_b_then_a(box: dict[str, str]) -> None:
    events: list[Event] = []
    first = do_switch("cpu-demo", events)
    assert answering(box["port"]) == ["smollm2-demo"]
    assert first.kv_tokens and first.kv_tokens > 0
    # The CPU decision the boot was started and verified with is in the record and live.json.
    decided = cpu.decide(cpu.detect())
    assert first.cpu is not None and first.cpu.dtype == decided.dtype
    assert first.cpu.reserved == decided.reserved
    shown = f"cpu: dtype {decided.dtype} ({decided.dtype_why}); engine on "
    assert any(e.message.startswith(shown) for e in events if e.kind == "step")
    assert {"starting", "loading weights", "kv cache sized", "ready"} <= set(first.phases)
    assert next(e.message for e in events if e.kind == "phase") == "starting"
    # The boot log shows load tracking on, so the stop's drain reads /load (not /metrics).
    assert first.drain == "load" and state.read_live().drain == "load"  # type: ignore[union-attr]
    # vLLM's model-info file (paroctl/modelinfo.py): a verified boot keeps it in the seed. Rewritten
    # compact (valid for vLLM; vLLM itself writes indent=2), it must reach cpu-demo-alt's fresh
    # cache byte for byte: its vLLM read it and skipped the inspection subprocess (~20 s a boot).
    seed_files = sorted(
        modelinfo.cache_dirs(ServePlan.of(profiles.load("cpu-demo")))[1].glob("*.json")
    )
    assert seed_files, "the first verified boot kept no model-info file"
    for path in seed_files:
        path.write_text(json.dumps(json.loads(path.read_text()), separators=(",", ":")))
    # A request in flight when the switch starts is drained, not cut off: it finishes whole.
    answer: list[str] = []
    arrived = threading.Event()

    def long_answer() -> None:  # read as it streams: the first chunk proves it is in flight
        body = {
            "model": "smollm2-demo",
            "prompt": "Once upon a time",
            "max_tokens": DRAINED_TOKENS,
            "ignore_eos": True,
            "stream": True,
        }
        url = f"http://127.0.0.1:{box['port']}/v1/completions"
        with requests.post(url, json=body, stream=True, timeout=120) as reply:
            for line in reply.iter_lines():
                if line.startswith(b"data: {"):
                    answer.append(json.loads(line[6:])["choices"][0]["text"])
                    arrived.set()

    streamer = threading.Thread(target=long_answer, daemon=True)
    streamer.start()
    assert arrived.wait(60), "the streamed completion never started"
    events.clear()
    second = do_switch("cpu-demo-alt", events)
    streamer.join(timeout=60)
    drained = [e.message for e in events if e.kind == "progress"]
    assert drained and drained[0] == "draining: 1 requests in flight", drained
    assert len(answer) >= DRAINED_TOKENS, f"cut off after {len(answer)} chunks"
    assert answering(box["port"]) == ["smollm2-alt"]
    alt_files = modelinfo.cache_dirs(ServePlan.of(profiles.load("cpu-demo-alt")))[0].glob("*.json")
    assert sorted(p.read_text() for p in alt_files) == sorted(p.read_text() for p in seed_files)
    assert state.read_live().serve.profile == "cpu-demo-alt"  # type: ignore[union-attr]
    assert state.read_live().cpu.dtype == decided.dtype  # type: ignore[union-attr]
    # The way back is the README's main job through the real CLI: `paroctl demo run` (setup finds
    # every part built, then the switch, the sanity gate against the new serve, the status).
    demo_run = subprocess.run(
        [sys.executable, "-m", "paroctl.cli.main", "demo", "run", "--profile", "cpu-demo"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert demo_run.returncode == 0, demo_run.stdout[-2000:] + demo_run.stderr[-2000:]
    shown = demo_run.stdout.splitlines()
    assert any(line.startswith("sanity: PASS") for line in shown), demo_run.stdout
    assert any(line.startswith("live:    cpu-demo (hash ") for line in shown), demo_run.stdout
    assert answering(box["port"]) == ["smollm2-demo"]
    third = state.read_live()
    assert third is not None and third.serve.profile == "cpu-demo"
    assert not third.first_boot  # the compile cache of cpu-demo is warm now
    assert len({first.boot_id, second.boot_id, third.boot_id}) == 3
    from paroctl.store import results

    boots = results.open_store().boots(limit=10)
    assert [b["profile"] for b in boots][:3] == ["cpu-demo", "cpu-demo-alt", "cpu-demo"]


def test_bad_engine_argument_rolls_back(box: dict[str, str]) -> None:
    assert state.read_live().serve.profile == "cpu-demo"  # type: ignore[union-attr]
    with pytest.raises(switch_mod.SwitchFailed) as info:
        do_switch("cpu-badarg")
    message = info.value.message
    assert "switch to cpu-badarg failed: cpu-badarg exited during boot" in message
    assert "rolled back: cpu-demo is live again and verified" in message
    log = Path(message.rsplit("log: ", 1)[1])
    assert "--no-such-flag" in log.read_text()
    assert answering(box["port"]) == ["smollm2-demo"]
    assert state.read_live().serve.profile == "cpu-demo"  # type: ignore[union-attr]


def test_forbidden_boot_marker_rolls_back(box: dict[str, str]) -> None:
    with pytest.raises(switch_mod.SwitchFailed) as info:
        do_switch("cpu-forbid")
    assert "forbidden boot line seen: 'Starting to load model'" in info.value.message
    assert "rolled back: cpu-demo is live again" in info.value.message
    assert answering(box["port"]) == ["smollm2-demo"]
    assert not LocalRuntime().is_active("cpu-forbid")


def test_serve_killed_mid_boot_rolls_back(box: dict[str, str]) -> None:
    runtime = LocalRuntime()

    killed: list[int] = []

    def kill_when_loading(event: Event) -> None:
        # The rollback's boot reaches "loading weights" too: kill only the first serve, once.
        if event.kind == "phase" and event.message == "loading weights" and not killed:
            pid = runtime.main_pid("cpu-demo-alt")
            assert pid is not None
            killed.append(pid)
            os.killpg(pid, signal.SIGKILL)

    with pytest.raises(switch_mod.SwitchFailed) as info:
        switch_mod.switch(
            profiles.load("cpu-demo-alt"),
            switch_mod.default_deps(kill_when_loading),
            load_profile=profiles.load,
        )
    assert killed
    assert "cpu-demo-alt exited during boot (phase: loading weights)" in info.value.message
    assert answering(box["port"]) == ["smollm2-demo"]


def test_two_switches_at_once_never_interleave(box: dict[str, str]) -> None:
    env = {
        **os.environ,
        "PAROCTL_HOME": box["PAROCTL_HOME"],
        "PAROCTL_PROFILES_DIR": box["PAROCTL_PROFILES_DIR"],
    }
    cmd = [sys.executable, "-m", "paroctl.cli.main"]
    first = subprocess.Popen(
        [*cmd, "switch", "cpu-demo-alt"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lock = Path(box["PAROCTL_HOME"]) / "locks" / "box.lock"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and lock.read_text().strip() != str(first.pid):
        time.sleep(0.05)
    second = subprocess.run(
        [*cmd, "switch", "cpu-demo"], env=env, capture_output=True, text=True, timeout=60
    )
    assert second.returncode == 2
    assert "another paroctl holds" in second.stderr
    out, _ = first.communicate(timeout=300)
    assert first.returncode == 0, out
    assert answering(box["port"]) == ["smollm2-alt"]


def test_lock_is_exclusive_in_process() -> None:
    with state.locked(), pytest.raises(StateError):
        do_switch("cpu-demo")


def test_stop_leaves_nothing(box: dict[str, str]) -> None:
    live = state.read_live()
    assert live is not None
    switch_mod.stop_live(live, switch_mod.default_deps())
    assert state.read_live() is None
    assert not net.port_open("127.0.0.1", int(box["port"]))
    assert not LocalRuntime().is_active(live.serve.profile)


def test_no_previous_means_left_stopped(box: dict[str, str]) -> None:
    with pytest.raises(switch_mod.SwitchFailed) as info:
        do_switch("cpu-badarg")
    assert "nothing was live before, so the box is left stopped" in info.value.message
    assert state.read_live() is None
