"""A real vLLM CPU serve of SmolLM2 through LocalRuntime, exercised through paroctl.client."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import pytest

from paroctl import net
from paroctl.client import metric_value
from paroctl.errors import RuntimeFailure
from paroctl.serve import cpu
from paroctl.serve.runtime.local import group_members

if TYPE_CHECKING:  # conftest is not importable as a module at run time
    from .conftest import CpuServe, DemoParts

pytestmark = pytest.mark.e2e

PROMPT = "The capital of France is"


def test_demo_parts_are_cached_and_idempotent(demo_parts: DemoParts) -> None:
    from paroctl import demo

    assert demo.venv_ready(demo.default_venv_dir())
    assert (demo_parts.model / "model.safetensors").is_file()
    # A second call finds the markers and does nothing.
    start = time.monotonic()
    assert demo.ensure_vllm_venv(demo.default_venv_dir()) == demo_parts.python
    assert demo.ensure_smollm2(demo.default_models_dir(), demo_parts.python) == demo_parts.model
    assert time.monotonic() - start < 10.0  # a real install or convert takes minutes
    print(f"\nvenv setup {demo_parts.venv_s:.1f} s, model convert {demo_parts.model_s:.1f} s")


def test_models_lists_exactly_the_served_name(live_cpu_serve: CpuServe) -> None:
    assert live_cpu_serve.client.models() == ["smollm2-demo"]
    print(f"\nserve boot {live_cpu_serve.boot_s[-1]:.1f} s")


def test_serve_log_shows_the_cpu_decision(live_cpu_serve: CpuServe) -> None:
    """vLLM itself reports the dtype and the core binding paroctl decided for this machine."""
    plan = cpu.decide(cpu.detect())
    spec = live_cpu_serve.spec
    assert spec.argv[spec.argv.index("--dtype") + 1] == plan.dtype
    assert spec.env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == str(plan.reserved)
    lines = list(live_cpu_serve.runtime.logs(spec.name))
    assert cpu.log_problems(plan, lines) == []
    # Every core the engine was given is in its OpenMP binding (vllm 0.32's report line).
    bound = [line for line in lines if "core ids=" in line]
    assert len(bound) == 1, bound
    ids = bound[0].split("core ids=")[1].strip().strip("[]").split(",")
    assert len(ids) == plan.cores - plan.reserved, bound[0]
    print(f"\n{plan.summary()}")


def test_greedy_completion_is_text_and_deterministic(live_cpu_serve: CpuServe) -> None:
    client, model = live_cpu_serve.client, live_cpu_serve.served_name
    first = client.completion(model, PROMPT, max_tokens=16)
    second = client.completion(model, PROMPT, max_tokens=16)
    text = first["choices"][0]["text"]
    assert isinstance(text, str) and text.strip()
    assert second["choices"][0]["text"] == text
    assert first["usage"]["completion_tokens"] <= 16


def test_tokenize_matches_the_completion_prompt(live_cpu_serve: CpuServe) -> None:
    client, model = live_cpu_serve.client, live_cpu_serve.served_name
    ids = client.tokenize(model, PROMPT)
    assert ids and all(isinstance(i, int) for i in ids)
    usage = client.completion(model, PROMPT, max_tokens=1)["usage"]
    assert usage["prompt_tokens"] == len(ids)


def test_logprobs_and_prompt_logprobs(live_cpu_serve: CpuServe) -> None:
    client, model = live_cpu_serve.client, live_cpu_serve.served_name
    out = client.completion(model, PROMPT, max_tokens=4, logprobs=2, prompt_logprobs=1)
    choice = out["choices"][0]
    assert len(choice["logprobs"]["token_logprobs"]) == len(choice["logprobs"]["tokens"])
    assert all(lp <= 0.0 for lp in choice["logprobs"]["token_logprobs"])
    # The first prompt token has no context, hence no logprob.
    assert choice["prompt_logprobs"][0] is None
    assert len(choice["prompt_logprobs"]) == len(client.tokenize(model, PROMPT))


def test_stream_matches_non_streamed_greedy(live_cpu_serve: CpuServe) -> None:
    client, model = live_cpu_serve.client, live_cpu_serve.served_name
    start = time.perf_counter()
    chunks = list(client.stream_completion(model, PROMPT, max_tokens=16))
    assert len(chunks) > 1
    stamps = [stamp for stamp, _ in chunks]
    assert stamps == sorted(stamps) and stamps[0] > start
    whole = client.completion(model, PROMPT, max_tokens=16)["choices"][0]["text"]
    assert "".join(text for _, text in chunks) == whole


def test_chat(live_cpu_serve: CpuServe) -> None:
    client, model = live_cpu_serve.client, live_cpu_serve.served_name
    out = client.chat(model, [{"role": "user", "content": "Say hello."}], max_tokens=8)
    assert out["choices"][0]["message"]["role"] == "assistant"
    assert out["choices"][0]["message"]["content"]


def test_metrics_has_vllm_counters(live_cpu_serve: CpuServe) -> None:
    client, model = live_cpu_serve.client, live_cpu_serve.served_name
    client.completion(model, PROMPT, max_tokens=2)
    metrics = client.metrics()
    assert any(name.startswith("vllm:") for name in metrics)
    assert metric_value(metrics, "vllm:request_success_total") >= 1
    assert metric_value(metrics, "vllm:prompt_tokens_total") > 0
    assert "vllm:kv_cache_usage_perc" in metrics


def test_http_errors_name_url_and_status(live_cpu_serve: CpuServe) -> None:
    client = live_cpu_serve.client
    with pytest.raises(
        RuntimeFailure, match=r"POST http://127\.0\.0\.1:\d+/v1/completions -> HTTP 404"
    ):
        client.completion("no-such-model", PROMPT, max_tokens=1)


def test_stop_closes_port_and_ends_every_process(live_cpu_serve: CpuServe) -> None:
    runtime, spec = live_cpu_serve.runtime, live_cpu_serve.spec
    leader = runtime.main_pid(spec.name)
    assert leader is not None
    members = group_members(leader)
    assert len(members) > 1  # the API server and vLLM's engine-core process at least
    port_closed: list[float] = []

    def watch_port() -> None:
        net.wait_port_closed(spec.host, spec.port, timeout=30.0, poll=0.01)
        port_closed.append(time.monotonic())

    watcher = threading.Thread(target=watch_port)
    start = time.monotonic()
    watcher.start()
    runtime.stop(spec.name, grace_s=30.0)
    gone = time.monotonic() - start
    watcher.join(timeout=30.0)
    assert port_closed, "port never closed"
    closed = port_closed[0] - start
    assert group_members(leader) == []
    assert not runtime.is_active(spec.name)
    assert not net.port_open(spec.host, spec.port)
    assert gone < 10.0, f"processes took {gone:.1f} s to go"
    print(f"\nstop: port closed {closed:.2f} s, {len(members)} processes gone {gone:.2f} s")
    with pytest.raises(RuntimeFailure, match="cannot connect"):
        live_cpu_serve.client._get("/v1/models", retries=1)
