"""Every gate end to end against the real vLLM CPU serve (SmolLM2-135M), with small limits."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from paroctl.cli.main import cli
from paroctl.gates import run_gate
from paroctl.store.results import open_store

if TYPE_CHECKING:
    from ..conftest import CpuServe
    from .conftest import FaultProxy

pytestmark = pytest.mark.e2e


def _gate(*args: str) -> Any:
    result = CliRunner().invoke(cli, ["gate", *args])
    return result


def _only_run(gate: str) -> dict[str, Any]:
    with open_store() as store:
        (run,) = store.runs(gate=gate)
        return {**run, "items": store.items(run["run_id"])}


def test_sanity_passes_and_records_provenance(
    live: CpuServe, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The README's demo, then `gate sanity` on a box without internet: no PAROCTL_DATA_DIR, an
    # empty download cache, no flag: the shipped corpus is found (it was "offline? pass --data").
    monkeypatch.delenv("PAROCTL_DATA_DIR", raising=False)
    monkeypatch.setenv("PAROCTL_CACHE", str(tmp_path / "empty-cache"))
    result = _gate("sanity")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("sanity: PASS — 5/5 required answers right")
    assert "sanity: 0/7 (0%)" in result.stderr  # progress lines off a terminal
    assert not (tmp_path / "empty-cache" / "data").exists()  # nothing fetched
    run = _only_run("sanity")
    assert (run["profile"], run["profile_hash"], run["boot_id"]) == (
        "cpu-demo",
        "e2e-hash",
        "e2e-boot",
    )
    assert run["server_version"] == "0.32.0" and run["paroctl_version"]
    long = next(i for i in run["items"] if i["key"] == "long-recall")
    assert 1900 <= long["prompt_tokens"] <= 2048 - 64  # ~7k asked, capped by max_model_len 2048


def test_stale_live_pointer_is_refused(
    live: CpuServe, point_live: Callable[[str, int, list[str]], None]
) -> None:
    point_live(live.spec.host, live.spec.port, ["some-other-model"])
    result = _gate("sanity")
    assert result.exit_code == 2
    assert "not the live record's ['some-other-model']" in result.output
    assert "the live pointer is stale" in result.output


def test_gsm8k_records_every_question_unjudged_without_a_band(live: CpuServe) -> None:
    # 64 answer tokens, not lm-eval's 256: the 135M model rambles to the limit (CI time)
    result = _gate("gsm8k", "--limit", "8", "--concurrency", "8", "--max-tokens", "64")
    run = _only_run("gsm8k")
    s = run["summary"]
    assert run["options"]["max_tokens"] == 64
    # cpu-demo has no GSM8K floor (a 135M model scores ~0-3%): the run is scored, recorded and
    # reported as unjudged, exit 0.
    assert result.exit_code == 0, result.output
    assert run["status"] == "unjudged"
    assert len(run["items"]) == 8 and s["answered"] == 8 and s["errors"] == 0
    assert sorted(i["index"] for i in run["items"]) == list(range(8))
    assert {i["outcome"] for i in run["items"]} <= {"correct", "wrong", "invalid", "truncated"}
    assert s["strict-match"]["low"] <= s["strict-match"]["acc"] <= s["strict-match"]["high"]
    assert all(i["prompt_tokens"] > 700 for i in run["items"])  # the 5-shot chat prompt


def test_gsm8k_completions_mode_and_resume_after_a_crash(live: CpuServe) -> None:
    class CrashAfter:
        def __init__(self, n: int) -> None:
            self.n, self.started = n, []

        def start(self, description: str, total: int, completed: int = 0) -> None:
            self.started.append((total, completed))

        def advance(self, steps: int = 1) -> None:
            self.n -= steps
            if self.n == 0:
                raise SystemExit(137)  # the process dies mid-run (kill -9: no handler runs)

    opts = {"limit": 4, "concurrency": 2, "mode": "completions", "max_tokens": 48}
    with pytest.raises(SystemExit):
        run_gate("gsm8k", opts, progress=CrashAfter(2))
    crashed = _only_run("gsm8k")
    assert crashed["status"] == "running" and len(crashed["items"]) == 2
    progress = CrashAfter(-1)
    result = run_gate("gsm8k", {"limit": 99}, progress=progress, resume=crashed["run_id"][:20])
    assert progress.started == [(4, 2)]  # the stored options win; only the missing 2 are asked
    done = _only_run("gsm8k")
    assert result.run_id == crashed["run_id"] and done["status"] == "unjudged"
    assert sorted(i["index"] for i in done["items"]) == [0, 1, 2, 3]
    assert done["summary"]["mode"] == "completions"


def test_timing_gates(live: CpuServe, unbanded_profiles: Path) -> None:
    decode = _gate("decode", "--contexts", "25,1000,99999", "--gen", "16", "--reps", "2")
    assert decode.exit_code == 0, decode.output
    run = _only_run("decode")
    points = run["summary"]["points"]
    assert sorted(points, key=int) == ["25", "1000", str(2048 - 16 - 1)]  # 99999 capped
    for item in run["items"]:
        assert item["completion_tokens"] == 16 and item["steps"] == 15
        assert item["ms_per_step"] > 0 and item["tpot_ms"] > 0 and item["ttft_ms"] > 0
        assert item["spec"] is None  # no drafter on the demo serve
    assert points["25"]["ms_per_step"]["n"] == 2

    prefill = _gate("prefill", "--lengths", "512,1024", "--reps", "2")
    assert prefill.exit_code == 0, prefill.output
    run = _only_run("prefill")
    assert {i["prompt_tokens"] for i in run["items"]} == {512, 1024}
    # Unique prompts: nothing came from the prefix cache, not even the second repetition.
    assert run["summary"]["prefix_hit_tokens"] == 0

    conc = _gate("concurrency", "--streams", "1,2,4", "--gen", "16")
    assert conc.exit_code == 0, conc.output
    points = _only_run("concurrency")["summary"]["points"]
    assert [points[n]["completion_tokens"] for n in ("1", "2", "4")] == [16, 32, 64]
    # Every point measured, none failed. (Whether four streams beat one is a speed claim for a
    # benchmark: on the 2-core CI box with the other worker busy, 4 streams took 6.56 tok/s
    # against 1 stream's 7.01 in a local run, 2026-12-03.)
    for n in ("1", "2", "4"):
        assert points[n]["streams"] == int(n) and points[n]["errors"] == [], points[n]
        assert 0 < points[n]["aggregate_tok_s"] < float("inf"), points[n]


def test_greedy_hashes_with_self_consistency_control(live: CpuServe) -> None:
    first = _gate("greedy", "--gen", "16")
    assert first.exit_code == 0, first.output
    with open_store() as store:
        (run_a,) = store.runs(gate="greedy")
        items = store.items(run_a["run_id"])
    assert len(items) == 5 and all(len(i["hashes"]) == 2 for i in items)
    second = _gate("greedy", "--gen", "16", "--against", run_a["run_id"])
    with open_store() as store:
        run_b = store.runs(gate="greedy")[0]
    counts = run_b["summary"]["counts"]
    # The same build against itself can be "same" or "unstable", never a real difference.
    assert set(counts) <= {"same", "unstable"}, run_b["summary"]
    assert second.exit_code == 0, second.output


def test_suite_passes_and_report_writes_plots(
    live: CpuServe, unbanded_profiles: Path, tmp_path: Path
) -> None:
    result = _gate(
        "suite", "--limit", "4", "--gen", "16", "--contexts", "25,512", "--lengths", "512",
        "--reps", "1", "--streams", "1,2", "--max-tokens", "48",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == "suite: PASS (6 gates)"
    report = CliRunner().invoke(cli, ["report", "--out", str(tmp_path / "rep")])
    assert report.exit_code == 0, report.output
    names = sorted(p.name for p in (tmp_path / "rep").iterdir())
    assert names == ["concurrency.png", "decode.png", "gsm8k.png", "prefill.png", "report.md"]


def test_faults_through_a_real_proxy_lose_no_item(
    live: CpuServe,
    fault_proxy: type[FaultProxy],
    point_live: Callable[[str, int, list[str]], None],
) -> None:
    plan = ["drop", "reset", "503", "slow", "stall", "503"]
    proxy = fault_proxy(plan, stall_s=32, slow_s=1)
    point_live("127.0.0.1", proxy.port, [live.served_name])
    opts = {"limit": 6, "concurrency": 3, "max_tokens": 32, "timeout_s": 30, "backoff_s": 0.2}
    result = run_gate("gsm8k", opts)
    run = _only_run("gsm8k")
    assert sorted(i["index"] for i in run["items"]) == list(range(6))  # no item lost
    assert run["summary"]["errors"] == 0 and result.status == "unjudged"
    assert proxy.injected == Counter({"drop": 1, "reset": 1, "503": 2, "slow": 1, "stall": 1})
    recorded = Counter(f.split(":")[0].split(" ")[0] for i in run["items"] for f in i["faults"])
    # Every injected fault is accounted for (slow is not a fault: it answered, late).
    assert recorded == Counter({"connection": 2, "HTTP": 2, "timeout": 1}), json.dumps(
        [i["faults"] for i in run["items"]]
    )
    assert run["summary"]["faults_retried"] == 5


def test_any_endpoint_by_url_with_a_key_is_gated_as_external(
    live_cpu_serve: CpuServe,
    gate_data: Path,
    fault_proxy: type[FaultProxy],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # No live record: the serve is reached only through its URL (via a pass-through proxy that
    # shows what was sent), as a cluster Service or any OpenAI-compatible endpoint would be.
    proxy = fault_proxy([])
    url, model = f"http://127.0.0.1:{proxy.port}", live_cpu_serve.served_name
    monkeypatch.setenv("PAROCTL_API_KEY", "sk-from-env")
    sanity = _gate("sanity", "--url", url, "--model", model)
    assert sanity.exit_code == 0, sanity.output
    run = _only_run("sanity")
    assert (run["profile"], run["profile_hash"], run["boot_id"]) == ("external", None, None)
    assert (run["options"]["url"], run["options"]["model"]) == (url, model)
    assert run["server_version"] == "0.32.0" and run["status"] == "pass"
    key_file = tmp_path / "key"
    key_file.write_text("sk-from-file\n")
    gsm = _gate("gsm8k", "--url", url, "--model", model, "--limit", "2", "--api-key-file",
                str(key_file), "--mode", "completions")  # fmt: skip
    assert gsm.exit_code == 0, gsm.output
    assert _only_run("gsm8k")["status"] == "unjudged"  # no bands named: an endpoint is not ours
    auth = [line for head in proxy.heads for line in head.split(b"\r\n")
            if line.lower().startswith(b"authorization:")]  # fmt: skip
    assert auth and set(auth) == {b"Authorization: Bearer sk-from-env",
                                  b"Authorization: Bearer sk-from-file"}  # fmt: skip
    assert len(auth) == len(proxy.heads)  # every connection carried a key
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p != key_file)
    assert b"sk-from" not in stored  # the key is sent, never stored
    wrong = _gate("sanity", "--url", url, "--model", "nope")
    assert wrong.exit_code == 2
    assert f"{url} serves ['{model}'], not --model 'nope'" in wrong.output
