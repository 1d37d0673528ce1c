"""Every profile x artefact against tests/golden, byte for byte, and the exact set of files."""

from __future__ import annotations

from pathlib import Path

import pytest

from paroctl.profile import profiles
from paroctl.serve import render

GOLDEN = Path(__file__).resolve().parent / "golden"


def _unit_goldens() -> list[Path]:
    # k8s-*.yaml beside them belong to tests/k8s/test_render.py (its own --update-golden).
    return [p for p in GOLDEN.rglob("*") if p.is_file() and not p.name.startswith("k8s")]


def _rendered() -> dict[str, str]:
    out: dict[str, str] = {}
    for prof in profiles.load_all():
        for artefact in render.render_all(prof):
            out[f"{prof.name}/{artefact.filename}"] = artefact.content
    return out


@pytest.mark.usefixtures("fixed_paths")
def test_golden_files(update_golden: bool) -> None:
    rendered = _rendered()
    if update_golden:
        for old in _unit_goldens():
            old.unlink()
        for rel, content in rendered.items():
            (GOLDEN / rel).parent.mkdir(parents=True, exist_ok=True)
            (GOLDEN / rel).write_text(content)
    on_disk = {str(p.relative_to(GOLDEN)): p.read_text() for p in _unit_goldens()}
    assert sorted(on_disk) == sorted(rendered), "golden file set differs (run --update-golden)"
    for rel, content in rendered.items():
        assert on_disk[rel] == content, f"{rel} differs from its golden file"


@pytest.mark.usefixtures("fixed_paths")
def test_every_profile_has_every_artefact_it_should() -> None:
    rendered = _rendered()
    for name in profiles.list_names():
        prof = profiles.load(name)
        expected = {"service", "env"} | ({"quadlet"} if prof.uses_engine else set())
        have = {
            fmt for fmt in render.FORMATS if f"{name}/{render.unit_filename(prof, fmt)}" in rendered
        }
        assert have == expected, name
