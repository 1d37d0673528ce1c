"""The model-info seed: a serve's cache is seeded from its installation's seed, a verified boot's
new or changed files go back, an unusable seed is skipped. The real-vLLM
side (a fresh home's boot finds the file and skips the subprocess) is in tests/e2e/test_switch.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from paroctl.profile import profiles
from paroctl.serve import modelinfo
from paroctl.serve.plan import ServePlan


@pytest.fixture
def shared_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "shared-cache"
    monkeypatch.setenv("PAROCTL_CACHE", str(cache))
    return cache


def test_seed_then_keep(shared_cache: Path) -> None:
    demo = ServePlan.of(profiles.load("cpu-demo"))
    alt = ServePlan.of(profiles.load("cpu-demo-alt"))
    serve_dir, seed_dir = modelinfo.cache_dirs(demo)
    assert serve_dir == Path(demo.layout.cache_dir) / "vllm" / "modelinfos"
    assert seed_dir.is_relative_to(shared_cache)
    # one installation (the same vLLM venv): one seed, whatever the profile
    alt_found = modelinfo.cache_dirs(alt)
    assert alt_found[1] == seed_dir and alt_found[0] != serve_dir

    assert modelinfo.seed_cache(demo) == 0  # nothing kept yet: nothing to copy, no error
    serve_dir.mkdir(parents=True)
    (serve_dir / "m-LlamaForCausalLM.json").write_text('{"hash": "a"}')
    (serve_dir / "notes.txt").write_text("not vLLM's")
    assert modelinfo.keep_boot(demo) == 1
    assert modelinfo.keep_boot(demo) == 0  # unchanged: not copied again
    assert sorted(p.name for p in seed_dir.iterdir()) == ["m-LlamaForCausalLM.json"]

    assert modelinfo.seed_cache(alt) == 1
    assert (alt_found[0] / "m-LlamaForCausalLM.json").read_text() == '{"hash": "a"}'
    # vLLM redid a stale file (new hash): keep replaces the seed's copy; seed never overwrites
    (alt_found[0] / "m-LlamaForCausalLM.json").write_text('{"hash": "b"}')
    assert modelinfo.keep_boot(alt) == 1
    assert (seed_dir / "m-LlamaForCausalLM.json").read_text() == '{"hash": "b"}'
    assert modelinfo.seed_cache(demo) == 0
    assert (serve_dir / "m-LlamaForCausalLM.json").read_text() == '{"hash": "a"}'


def test_unreadable_seed_is_ignored(shared_cache: Path) -> None:
    demo = ServePlan.of(profiles.load("cpu-demo"))
    found = modelinfo.cache_dirs(demo)
    found[1].parent.mkdir(parents=True)
    found[1].write_text("a file where the seed directory should be")
    assert modelinfo.seed_cache(demo) == 0
    found[0].mkdir(parents=True)
    (found[0] / "m.json").write_text("{}")
    assert modelinfo.keep_boot(demo) == 0  # cannot write under a file: skipped, not raised
