"""The plugin's knob reader: registry from package data, PARO_* env only, empty = error."""

from __future__ import annotations

import pytest
from paro_vllm import knobs

from paroctl.profile import knobs as host_knobs


def test_registry_matches_what_paroctl_reads() -> None:
    plugin = knobs.registry()
    host = host_knobs.load_registry()
    assert sorted(plugin) == sorted(host.knobs)
    assert {n: k.default for n, k in plugin.items()} == {
        n: k.default for n, k in host.knobs.items()
    }
    assert plugin["PARO_BACKEND"].values == ("auto", "reference", "triton")


def test_defaults_when_nothing_is_set() -> None:
    values = knobs.read_env({"PAROCTL_HOME": "/x", "PATH": "/bin"})
    assert values["PARO_BACKEND"] == "auto"
    assert values["PARO_DECODE_MAX_M"] == "64"


def test_set_values_are_read() -> None:
    assert knobs.read_env({"PARO_BACKEND": "reference"})["PARO_BACKEND"] == "reference"


def test_every_problem_is_reported_at_once() -> None:
    env = {"PARO_BACKEND": "", "PARO_DECODE_MAX_M": "500", "PARO_BAKEND": "reference"}
    with pytest.raises(knobs.KnobError) as info:
        knobs.read_env(env)
    msg = str(info.value)
    assert "PARO_BACKEND: empty value (VAR= is set-but-empty, not unset)" in msg
    assert "PARO_DECODE_MAX_M: expected an integer in [1, 128], got 500" in msg
    assert "PARO_BAKEND: not a registered paro-vllm knob" in msg


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("PARO_BACKEND", "cuda", "expected one of auto, reference, triton; got 'cuda'"),
        ("PARO_ATILED", "true", "expected '0' or '1', got 'true'"),
        ("PARO_DECODE_MAX_M", "x", "expected an integer, got 'x'"),
    ],
)
def test_bad_values(name: str, value: str, why: str) -> None:
    with pytest.raises(knobs.KnobError, match=f"{name}: {why}"):
        knobs.read_env({name: value})
