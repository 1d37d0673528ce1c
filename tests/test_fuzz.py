"""Property-based fuzz: a mutated profile loads or fails with a clean ProfileError; nothing else.

Every case runs in a worker process under a memory limit and a per-case wall time
(fuzz_sandbox.py): a hang or a blow-up fails the test with the case named. 1,000 cases a run.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fuzz_sandbox import CaseFailed, Sandbox
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
SEEDS = {
    name: yaml.safe_load((REPO / "profiles" / f"{name}.yaml").read_text())
    for name in ("paro-int5", "nvfp4", "cpu-demo", "bf16-ref")
}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(
        [
            "",
            "0",
            "1",
            "fp8",
            "int8",
            "auto",
            "prod",
            "eval",
            "_r9700",
            "_cpu",
            "PARO_ACT_FORMAT",
            "re:(",
            "{home}",
            "-1",
            "0.5",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    return out


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(SEEDS[draw(st.sampled_from(sorted(SEEDS)))])
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in _paths(doc) if p]
        path = draw(st.sampled_from(paths))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(values)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent.get(path[-1]), dict):
            parent[path[-1]][draw(st.text(min_size=1, max_size=10))] = draw(values)
    return doc


def _worker_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAROCTL_")}
    return {**env, "PAROCTL_HOME": str(home), "PAROCTL_CACHE": str(home / "cache")}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    box = Sandbox(_worker_env(tmp_path_factory.mktemp("fuzz-home")))
    yield box
    box.close()


def test_the_sandbox_fails_a_hang_and_a_memory_blow_up(tmp_path: Path) -> None:
    box = Sandbox(_worker_env(tmp_path), timeout_s=1.0)
    try:
        with pytest.raises(CaseFailed, match=r"^hang: no answer within 1.0 s"):
            box.ask({"probe": "hang"})
        assert box.ask({"probe": "allocate", "bytes": 1 << 20}) == str(1 << 20)  # a fresh worker
        with pytest.raises(CaseFailed, match=r"MemoryError"):
            box.ask({"probe": "allocate", "bytes": 8 << 30})
    finally:
        box.close()


FUZZ = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@FUZZ
@given(doc=mutated())
def test_mutated_profiles_fail_cleanly(
    sandbox: Sandbox, profile_dir: Path, doc: dict[str, Any]
) -> None:
    sandbox.check(profile_dir, yaml.safe_dump(doc))


@FUZZ
@given(text=st.text(max_size=200))
def test_arbitrary_text_fails_cleanly(sandbox: Sandbox, profile_dir: Path, text: str) -> None:
    sandbox.check(profile_dir, text)


# --- YAML features: anchors and aliases, tags, merge keys, duplicate and non-string keys, nesting

SECTIONS = ("description", "extends", "box", "runtime", "image", "container", "model", "serve",
            "env", "knobs", "boot", "gates")  # fmt: skip
TAGGED = st.sampled_from(
    [
        "!!int abc", "!!int 0x1F", "!!float nan", "!!float .inf", "!!binary '!!!'", "!!binary aGk=",
        "!!timestamp 2001-12-14", "!!timestamp x", "!!set {a, b}", "!!omap [a: 1]", "!!str 1",
        "!!python/name:os.system", "!!python/object/apply:os.system [id]", "!custom x", "!!null ''",
        "!!bool maybe", "2:14:03", "0o17", "1_000", "yes", "~", "'\\'", '"\\u2028"', "9" * 5000,
    ]
)  # fmt: skip
PLAIN = st.sampled_from(["a", "1", "-1", "0.5", "true", "null", "''", "/dev/kfd", "re:", "_cpu"])
KEYS = st.one_of(PLAIN, st.sampled_from(["port", "env", "[1, 2]", "{a: 1}", "? x", "<<"]))


@st.composite
def flow(draw: st.DrawFn, depth: int = 0) -> str:
    """A YAML flow value: scalars, tagged scalars, aliases, lists and maps (anchored at times)."""
    kind = draw(st.sampled_from(["plain", "tag", "alias", "list", "map", "deep"]))
    if kind == "plain" or depth > 3:
        text = draw(PLAIN)
    elif kind == "tag":
        text = draw(TAGGED)
    elif kind == "alias":
        text = f"*a{draw(st.integers(0, 3))}"
    elif kind == "deep":
        levels = draw(st.integers(1, 80))
        text = "[" * levels + "]" * levels
    elif kind == "list":
        text = "[" + ", ".join(draw(st.lists(flow(depth + 1), max_size=4))) + "]"
    else:
        pairs = draw(st.lists(st.tuples(KEYS, flow(depth + 1)), max_size=4))
        text = "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
    if draw(st.booleans()) and not text.startswith(("*", "!")):
        text = f"&a{draw(st.integers(0, 3))} {text}"
    return text


@st.composite
def featured(draw: st.DrawFn) -> str:
    """A seed profile with sections replaced, repeated or added as YAML text with those features."""
    doc = copy.deepcopy(SEEDS[draw(st.sampled_from(sorted(SEEDS)))])
    lines = []
    for _ in range(draw(st.integers(1, 4))):
        section = draw(st.sampled_from(SECTIONS))
        if draw(st.booleans()):
            doc.pop(section, None)  # replaced, not repeated (a repeat is refused at the first key)
        lines.append(f"{section}: {draw(flow())}")
    if draw(st.booleans()):
        lines.append(f"{draw(KEYS)}: {draw(flow())}")  # a non-string or odd top-level key
    return yaml.safe_dump(doc) + "\n".join(lines) + "\n"


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=featured())
def test_yaml_features_fail_cleanly_and_quickly(
    sandbox: Sandbox, profile_dir: Path, text: str
) -> None:
    sandbox.check(profile_dir, text)


# --- what the real tools read: `!!binary` in every string field; env values through systemd ----


def _string_locations(node: Any, loc: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(node, str):
        return [loc]
    if isinstance(node, dict):
        return [x for k, v in node.items() for x in _string_locations(v, (*loc, k))]
    if isinstance(node, list):
        return [x for i, v in enumerate(node) for x in _string_locations(v, (*loc, i))]
    return []


@st.composite
def binary_field(draw: st.DrawFn) -> str:
    """A seed profile with one string field (any depth) replaced by a `!!binary` value."""
    doc = copy.deepcopy(SEEDS[draw(st.sampled_from(sorted(SEEDS)))])
    loc = draw(st.sampled_from(_string_locations(doc)))
    parent = doc
    for part in loc[:-1]:
        parent = parent[part]
    parent[loc[-1]] = draw(st.binary(max_size=16))
    return yaml.safe_dump(doc)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=binary_field())
def test_binary_yaml_in_any_string_field_is_refused(
    sandbox: Sandbox, profile_dir: Path, text: str
) -> None:
    assert "!!binary" in text
    assert sandbox.check(profile_dir, text) == "refused"


# The characters env-file parsers treat specially (quotes, escapes, expansion, comments, blanks),
# a few plain ones and one outside ASCII.
ENV_TEXT = st.text(alphabet=list("\"'\\$ #;=`{}()*!abc0é"), max_size=10)


def _env_profile(values: list[str]) -> str:
    """cpu-demo (engine none: systemd reads its env file) with the values as HF_FUZZ_<i>."""
    doc = copy.deepcopy(SEEDS["cpu-demo"])
    doc.setdefault("env", {}).update({f"HF_FUZZ_{i}": v for i, v in enumerate(values)})
    return yaml.safe_dump(doc, allow_unicode=True)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=st.lists(ENV_TEXT, min_size=1, max_size=8))
def test_env_values_read_back_through_systemds_parser(
    sandbox: Sandbox, profile_dir: Path, values: list[str]
) -> None:
    # The worker reads every rendered env file of a systemd-read profile back with systemd's
    # load_env_file and fails the case on any difference (fuzz_sandbox._case).
    outcome = sandbox.check(profile_dir, _env_profile(values))
    assert outcome == ("refused" if "" in values else "rendered")
