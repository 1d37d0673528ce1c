"""The gate / results / report CLI without a serve: exit codes, messages, files written."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from paroctl import state
from paroctl.cli.main import cli
from paroctl.records import LiveRecord
from paroctl.store.results import Provenance, open_store


def _prov(profile: str) -> Provenance:
    return Provenance(
        profile, "h-" + profile, {}, None, "boot-" + profile, False, "0.1.0", "0.32.0"
    )


def test_gate_with_nothing_live_cannot_run() -> None:
    result = CliRunner().invoke(cli, ["gate", "sanity"])
    assert result.exit_code == 2
    assert "nothing is live; run `paroctl switch NAME` first" in result.output


def test_gate_against_a_dead_address_cannot_run() -> None:
    from paroctl import net

    state.write_live(LiveRecord.from_dict(
        {"profile": "cpu-demo", "host": "127.0.0.1", "port": net.free_port(),
         "served_names": ["smollm2-demo"], "hash": "x"}
    ))  # fmt: skip
    result = CliRunner().invoke(cli, ["gate", "gsm8k", "--limit", "1"])
    assert result.exit_code == 2
    assert "the live serve (cpu-demo) does not answer" in result.output


def _seed_store() -> None:
    with open_store() as store:
        for profile, ms, acc in (("cpu-demo", 30.0, 0.2), ("cpu-demo-alt", 27.0, 0.25)):
            store.start_run(f"d-{profile}", "decode", _prov(profile), {})
            points = {str(c): {"ms_per_step": {"median": ms + c / 1000}} for c in (25, 1000)}
            store.finish_run(f"d-{profile}", "unjudged", {"points": points}, "ms/step", ms, "m")
            store.start_run(f"g-{profile}", "gsm8k", _prov(profile), {})
            summary = {
                "metric": "flexible-extract",
                "flexible-extract": {"acc": acc, "low": acc - 0.1, "high": acc + 0.1, "correct": 1},
            }
            store.finish_run(f"g-{profile}", "pass", summary, "acc", acc, "ok")
            store.start_run(f"c-{profile}", "concurrency", _prov(profile), {})
            points = {"1": {"aggregate_tok_s": 30.0}, "4": {"aggregate_tok_s": 100.0}}
            store.finish_run(f"c-{profile}", "unjudged", {"points": points}, "tok/s", 100.0)


def test_results_list_show_compare() -> None:
    _seed_store()
    runner = CliRunner()
    listed = runner.invoke(cli, ["results", "list"])
    assert listed.exit_code == 0, listed.output
    assert "d-cpu-demo-alt" in listed.output and "gsm8k" in listed.output
    shown = runner.invoke(cli, ["results", "show", "g-cpu-demo"])
    assert shown.exit_code == 0
    assert "boot_id: boot-cpu-demo" in shown.output and "server_version: 0.32.0" in shown.output
    compared = runner.invoke(cli, ["results", "compare", "d-cpu-demo", "d-cpu-demo-alt"])
    assert compared.exit_code == 0, compared.output
    assert "ms_per_step @25" in compared.output and "-10.0%" in compared.output
    mixed = runner.invoke(cli, ["results", "compare", "d-cpu-demo", "g-cpu-demo"])
    assert mixed.exit_code == 2 and "is decode" in mixed.output
    missing = runner.invoke(cli, ["results", "show", "nope"])
    assert missing.exit_code == 2 and "no run 'nope'" in missing.output


def test_report_writes_markdown_and_plots(tmp_path: Path) -> None:
    _seed_store()
    out = tmp_path / "rep"
    result = CliRunner().invoke(cli, ["report", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "concurrency.png", "decode.png", "gsm8k.png", "report.md",
    ]  # fmt: skip
    text = (out / "report.md").read_text()
    assert "| gate | cpu-demo | cpu-demo-alt |" in text
    assert "![decode](decode.png)" in text
    assert (out / "decode.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    only = CliRunner().invoke(
        cli, ["report", "--profile", "cpu-demo", "--out", str(tmp_path / "o")]
    )
    assert only.exit_code == 0
    assert "cpu-demo-alt" not in (tmp_path / "o" / "report.md").read_text()


def _help(*gate: str) -> str:
    result = CliRunner().invoke(cli, ["gate", *gate, "--help"])
    assert result.exit_code == 0, result.output
    return result.output


def test_each_gate_help_shows_only_its_own_options() -> None:
    gsm = _help("gsm8k")
    assert "--limit" in gsm and "--mode" in gsm and "--contexts" not in gsm
    assert "--chunks" not in gsm and "gsm8k:" not in gsm  # no other gate's options or labels
    decode = _help("decode")
    assert "--contexts" in decode and "--limit" not in decode and "--streams" not in decode
    kld = _help("kld")
    assert "--top-k" in kld and "--gen" not in kld
    for name in ("sanity", "gsm8k", "decode", "prefill", "concurrency", "greedy", "kld", "suite"):
        text = _help(name)
        assert all(opt in text for opt in ("--url", "--model", "--api-key-file", "--bands"))
    suite = _help("suite")
    assert "--limit" in suite and "--contexts" in suite and "--resume" not in suite
    listed = _help()
    assert all(name in listed for name in ("gsm8k", "kld", "suite"))


def test_endpoint_options_are_checked_before_connecting(tmp_path: Path) -> None:
    from paroctl import net

    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(cli, ["gate", "sanity", *args])
        return result.exit_code, result.output

    code, out = run("--url", "ftp://box", "--model", "m")
    assert code == 2 and "Invalid value for '--url'" in out
    code, out = run("--url", "http://box:8000")
    assert code == 2 and "--url and --model go together" in out
    code, out = run("--bands", "cpu-demo")
    assert code == 2 and "--bands is for --url" in out
    missing = tmp_path / "no-key"
    code, out = run("--url", "http://box:8000", "--model", "m", "--api-key-file", str(missing))
    assert code == 2 and f"--api-key-file {missing}: cannot read it" in out
    url = f"http://127.0.0.1:{net.free_port()}"
    code, out = run("--url", url, "--model", "m")
    assert code == 2 and f"{url}/v1/models: the endpoint does not answer" in out
