"""End to end: SmolLM2 -> `paro-quant rtn` (int4 g64) -> vLLM on CPU + paro-vllm -> KL vs bf16.

Boots the `cpu-demo-paro` profile's exact command line under a LocalRuntime, checks the plugin's
boot marker, a completion, decode speed, and the KL divergence of top-20 prompt logprobs against
the bf16 demo serve on a WikiText-2 slice; then a checkpoint with its qzeros packed in the wrong
nibble order, which `paro-quant inspect` must reject and which, forced through, must be far worse.
Measured numbers are printed (run with -s) and attached to the test report.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

try:
    import paro_kernels  # noqa: F401
except ImportError:  # a plain checkout: the kernels distribution is not installed here
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kernels"))

from paroctl import cpu, demo, engine, net, profiles
from paroctl.client import Client
from paroctl.gates import data
from paroctl.runtime import ServeSpec
from paroctl.runtime.local import LocalRuntime

if TYPE_CHECKING:  # conftest is not importable as a module at run time
    from .conftest import CpuServe, DemoParts

PROFILE = "cpu-demo-paro"
CHUNKS, CHUNK_CHARS, TOP_K = 8, 600, 20
DECODE_TOKENS = 64
BOOT_TIMEOUT_S = 300.0
SHARED_DATA = Path(__file__).resolve().parents[1] / "data"  # tests/data: the repository's copy
MARKER = "paro-vllm: method=paroquant backend=reference bits=4 layers=210/210 version="

LogprobRow = Mapping[int, float]


# --------------------------------------------------------------------------- pure scoring


def kl_topk(ref: LogprobRow, cand: LogprobRow) -> float:
    """KL(ref || cand) over ref's top-k tokens, both renormalized on that set.

    A token missing from cand's top-k gets cand's smallest listed logprob: an upper bound on its
    probability, so the KL is, if anything, underestimated for very poor candidates.
    """
    floor = min(cand.values())
    tokens = list(ref)
    p = [math.exp(ref[t]) for t in tokens]
    q = [math.exp(cand.get(t, floor)) for t in tokens]
    sp, sq = sum(p), sum(q)
    return sum(pi / sp * math.log((pi / sp) / (qi / sq)) for pi, qi in zip(p, q, strict=True))


def mean_kl(ref_rows: Sequence[LogprobRow], cand_rows: Sequence[LogprobRow]) -> tuple[float, float]:
    """(mean KL, top-1 agreement) over aligned positions."""
    kls = [kl_topk(r, c) for r, c in zip(ref_rows, cand_rows, strict=True)]
    top1 = [
        max(r, key=r.__getitem__) == max(c, key=c.__getitem__)
        for r, c in zip(ref_rows, cand_rows, strict=True)
    ]
    return sum(kls) / len(kls), sum(top1) / len(top1)


def test_kl_topk_on_fixed_inputs() -> None:
    same = {1: math.log(0.7), 2: math.log(0.2), 3: math.log(0.1)}
    assert kl_topk(same, same) == pytest.approx(0.0, abs=1e-12)
    other = {1: math.log(0.2), 2: math.log(0.7), 4: math.log(0.1)}
    # token 3 missing from cand -> floor 0.1; renormalized q = (0.2, 0.7, 0.1)
    want = 0.7 * math.log(0.7 / 0.2) + 0.2 * math.log(0.2 / 0.7) + 0.1 * math.log(1.0)
    assert kl_topk(same, other) == pytest.approx(want)
    assert mean_kl([same, same], [same, other]) == (pytest.approx(want / 2), 0.5)


# --------------------------------------------------------------------------- serving helpers


@dataclass
class Measured:
    """Numbers collected across this module, reported at the end."""

    values: dict[str, Any]


@pytest.fixture(scope="module")
def measured() -> Iterator[Measured]:
    m = Measured({})
    yield m
    print("\nparo e2e measurements:", m.values)


def _chunks() -> list[str]:
    shared = SHARED_DATA / "wikitext2"  # the copy beside the repository; else fetched once
    text = data.load_corpus(shared if shared.is_dir() else None)
    paras = [p.strip() for p in text.split("\n") if len(p.strip()) > CHUNK_CHARS and " = " not in p]
    return [p[:CHUNK_CHARS] for p in paras[:CHUNKS]]


def prompt_logprobs(client: Client, model: str, prompt: str) -> list[dict[int, float]]:
    """Top-k prompt logprobs per position (the first position has none)."""
    out = client.completion(model, prompt, max_tokens=1, prompt_logprobs=TOP_K)
    rows = out["choices"][0]["prompt_logprobs"] or out.get("prompt_logprobs")
    result = []
    for row in rows[1:]:
        ranked = {int(t): v for t, v in row.items() if v["rank"] <= TOP_K}
        result.append({t: float(v["logprob"]) for t, v in ranked.items()})
    return result


def collect(client: Client, model: str) -> list[dict[int, float]]:
    """Prompt logprob rows of every WikiText chunk, concatenated."""
    return [row for chunk in _chunks() for row in prompt_logprobs(client, model, chunk)]


def decode_tok_s(client: Client, model: str) -> float:
    """Best of two timed greedy completions of DECODE_TOKENS tokens (EOS ignored)."""
    best = 0.0
    for _ in range(2):
        start = time.perf_counter()
        out = client.completion(model, "Once upon a time", DECODE_TOKENS, ignore_eos=True)
        best = max(best, out["usage"]["completion_tokens"] / (time.perf_counter() - start))
    return best


@dataclass
class ParoServe:
    """A live serve of one ParoQuant checkpoint through the cpu-demo-paro profile."""

    runtime: LocalRuntime
    spec: ServeSpec
    client: Client
    served_name: str
    boot_s: float

    def log(self) -> str:
        """The whole serve log so far."""
        return "\n".join(self.runtime.logs(self.spec.name))


def _profile_spec(model: Path, port: int) -> tuple[ServeSpec, str]:
    profile = cpu.resolved(profiles.load(PROFILE))  # this machine's dtype, cores and KV
    argv = engine.serve_argv(profile)
    argv[argv.index("--model") + 1] = str(model)
    argv[argv.index("--port") + 1] = str(port)
    spec = ServeSpec(PROFILE, tuple(argv), engine.forwarded_env(profile), port, "127.0.0.1")
    return spec, profile.body.model.served_names[0]


def boot(model: Path, root: Path) -> ParoServe:
    """Start the profile's serve on `model` and wait for /health (fails with the log tail)."""
    spec, name = _profile_spec(model, net.free_port())
    runtime = LocalRuntime(root=root)
    client = Client(f"http://127.0.0.1:{spec.port}", timeout_s=300.0)
    start = time.monotonic()
    runtime.start(spec)
    try:
        client.wait_healthy(BOOT_TIMEOUT_S, alive=lambda: runtime.is_active(spec.name))
    except Exception as exc:
        tail = "\n".join(list(runtime.logs(spec.name))[-40:])
        runtime.stop(spec.name, grace_s=5.0)
        raise AssertionError(f"{exc}\n--- serve log tail ---\n{tail}") from exc
    return ParoServe(runtime, spec, client, name, time.monotonic() - start)


def stop(serve: ParoServe) -> None:
    """Stop a serve and close its client."""
    serve.client.close()
    serve.runtime.stop(serve.spec.name, grace_s=10.0)


@pytest.fixture(scope="module")
def paro_model(demo_parts: DemoParts) -> Path:
    """paro-kernels + paro-vllm in the venv, and the rtn'd demo model (both idempotent)."""
    demo.ensure_plugin(demo_parts.python)
    return demo.ensure_smollm2_paro(demo.default_models_dir(), demo_parts.python)


@pytest.fixture(scope="module")
def bf16_rows(cpu_serve: CpuServe, measured: Measured) -> list[dict[int, float]]:
    """Reference logprobs and decode speed from the bf16 demo serve, then it is stopped (CPU)."""
    cpu_serve.ensure_up()
    rows = collect(cpu_serve.client, cpu_serve.served_name)
    measured.values["bf16_decode_tok_s"] = round(
        decode_tok_s(cpu_serve.client, cpu_serve.served_name), 2
    )
    # Two cores: a second live serve would skew the quantized serve's timing.
    cpu_serve.runtime.stop(cpu_serve.spec.name, grace_s=10.0)
    return rows


@pytest.fixture(scope="module")
def paro_serve(
    paro_model: Path, bf16_rows: list[dict[int, float]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ParoServe]:
    """The ParoQuant demo model served by the cpu-demo-paro profile."""
    serve = boot(paro_model, tmp_path_factory.mktemp("paro-serve"))
    try:
        yield serve
    finally:
        stop(serve)


# --------------------------------------------------------------------------- tests


@pytest.mark.e2e
def test_boot_marker_once_with_every_layer(paro_serve: ParoServe, measured: Measured) -> None:
    log = paro_serve.log()
    lines = [line for line in log.splitlines() if "paro-vllm: method=" in line]
    assert len(lines) == 1, lines  # one process loads the model: exactly one marker
    assert MARKER in lines[0]
    assert "Traceback (most recent call last)" not in log
    measured.values["paro_boot_s"] = round(paro_serve.boot_s, 1)


@pytest.mark.e2e
def test_completion_is_sensible(paro_serve: ParoServe, measured: Measured) -> None:
    assert paro_serve.client.models() == [paro_serve.served_name]
    out = paro_serve.client.completion(paro_serve.served_name, "The capital of France is", 16)
    text = out["choices"][0]["text"]
    profile = profiles.load(PROFILE).body.boot
    sanity = paro_serve.client.completion(paro_serve.served_name, profile.sanity_prompt, 16)
    measured.values["sanity"] = sanity["choices"][0]["text"]
    words = [w for w in text.split() if w.isalpha()]
    assert len(words) >= 5, text  # real words, not token soup
    assert len(set(words)) >= 3, text


@pytest.mark.e2e
def test_kl_vs_bf16_is_small(
    paro_serve: ParoServe, bf16_rows: list[dict[int, float]], measured: Measured
) -> None:
    rows = collect(paro_serve.client, paro_serve.served_name)
    kl, top1 = mean_kl(bf16_rows, rows)
    measured.values.update(paro_kl=round(kl, 4), paro_top1=round(top1, 3), positions=len(rows))
    measured.values["paro_decode_tok_s"] = round(
        decode_tok_s(paro_serve.client, paro_serve.served_name), 2
    )
    # RTN int4 g64 with random (untrained) rotations on a 135M model: measured 0.29 / 61%.
    assert math.isfinite(kl) and kl < 0.5, (kl, top1)
    assert top1 > 0.5


# --------------------------------------------------------------------------- corrupted checkpoint


@pytest.mark.e2e
def test_wrong_nibble_order_is_rejected_and_much_worse(
    paro_model: Path,
    paro_serve: ParoServe,
    bf16_rows: list[dict[int, float]],
    demo_parts: DemoParts,
    tmp_path: Path,
    measured: Measured,
    nibble_corrupter: Callable[[Path, Path], None],
) -> None:
    good_kl, _ = mean_kl(bf16_rows, collect(paro_serve.client, paro_serve.served_name))
    stop(paro_serve)  # CPU and memory for the corrupted serve
    bad = tmp_path / "paro-bad-nibbles"
    nibble_corrupter(paro_model, bad)
    inspect = subprocess.run(
        [str(demo_parts.python), "-m", "paro_kernels.cli", "inspect", str(bad)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert inspect.returncode == 1, inspect.stdout + inspect.stderr
    assert "nibble order" in inspect.stdout and "Traceback" not in inspect.stderr
    serve = boot(bad, tmp_path / "runs")
    try:
        kl, top1 = mean_kl(bf16_rows, collect(serve.client, serve.served_name))
    finally:
        stop(serve)
    measured.values.update(corrupt_kl=round(kl, 4), corrupt_top1=round(top1, 3))
    # Top-20 KL saturates for a broken model (missing tokens get the floor): measured 4x; the
    # top-1 agreement collapses (measured 2% vs 61%).
    assert kl > 3 * good_kl and kl > 0.8, (kl, good_kl)
    assert top1 < 0.2, top1
