"""Values that validated and then broke a render, a serve or a switch: refused at validate, each
with a message naming the file and the dotted key."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from paroctl.errors import ProfileError
from paroctl.profile import checks, profiles

SHIPPED = Path(__file__).resolve().parents[1] / "profiles"
GOOD = "description: t\nextends: _r9700\nmodel:\n  path: M\n  served_names: [m]\n"
CPU = "description: t\nextends: cpu-demo\n"
RANGE = "it can backtrack for minutes on one line; write the repeated part without its own "


def _problems(directory: Path, text: str) -> list[str]:
    (directory / "bad.yaml").write_text(text)
    with pytest.raises(ProfileError) as info:
        profiles.load("bad", directory)
    return [p.removeprefix(f"{directory}/bad.yaml: ") for p in info.value.problems]


def _plain(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [_plain(v) for v in node]
    return node


def _string_locations(node: Any, loc: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(node, str):
        return [loc]
    if isinstance(node, dict):
        return [x for k, v in node.items() for x in _string_locations(v, (*loc, k))]
    if isinstance(node, list):
        return [x for i, v in enumerate(node) for x in _string_locations(v, (*loc, i))]
    return []


def test_binary_yaml_in_every_string_field_is_refused_at_validate(profile_dir: Path) -> None:
    # `!!binary` gave bytes, which pydantic decoded into any text field, control characters and
    # all: 57 cases over 19 fields validated (and `unit render` refused them later). Every string
    # field of the shipped profiles, each once (in the first profile that has it).
    seen: set[str] = set()
    for name in profiles.list_names(SHIPPED):
        body = _plain(profiles.load(name, SHIPPED).body.model_dump(mode="python"))
        for loc in _string_locations(body):
            dotted = ".".join(str(p) for p in loc)
            if dotted in seen:
                continue
            seen.add(dotted)
            doc = copy.deepcopy(body)
            parent = doc
            for part in loc[:-1]:
                parent = parent[part]
            parent[loc[-1]] = b"a\n[Service]\nExecStartPre=/bin/sh -c id"
            text = yaml.safe_dump(doc)
            assert "!!binary" in text
            problems = _problems(profile_dir, text)
            assert any(
                p.startswith(f"{dotted}: value is binary (!!binary); write it as text")
                for p in problems
            ), (name, dotted, problems)
    assert len(seen) > 40, sorted(seen)


def test_binary_keys_and_yaml_sets_are_checked_too(profile_dir: Path) -> None:
    assert _problems(profile_dir, GOOD + "env:\n  ? !!binary SEZfWA==\n  : x\n") == [
        "env.b'HF_X': key is binary (!!binary); write it as text"
    ]
    # A `!!set` is taken for a tuple field: its members are checked like a list's.
    assert _problems(profile_dir, GOOD + 'serve:\n  extra_args: !!set {"a\\nb": null}\n') == [
        "serve.extra_args.0: value contains control character U+000A (line feed); remove it"
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            CPU + "serve:\n  tensor_parallel_size: 64\n",
            "serve.tensor_parallel_size: expected 1 on a cpu box (one engine binds the cores), "
            "got 64",
        ),
        (
            GOOD + "serve:\n  generation_override: {temperature: -5}\n",
            "serve.generation_override: temperature: expected a number in [0, 2], got -5; "
            "got {'temperature': -5}",
        ),
        (
            GOOD + "serve:\n  generation_override: {temprature: 0.5}\n",
            "serve.generation_override: 'temprature': not a generation key vLLM reads "
            "(temperature, top_p, top_k, min_p, repetition_penalty, presence_penalty, "
            "frequency_penalty, max_new_tokens); got {'temperature': 0.7, 'temprature': 0.5}",
        ),
        (
            GOOD + "serve:\n  generation_override: {top_k: 1.5}\n",
            "serve.generation_override: top_k: expected an integer, got 1.5; "
            "got {'temperature': 0.7, 'top_k': 1.5}",
        ),
        (
            GOOD + "boot:\n  sanity_expect: ' '\n",
            "boot.sanity_expect: blank; expected text to look for; got ' '",
        ),
        (
            GOOD + "boot:\n  expect: [ok, ' ']\n",
            "boot.expect: [1]: blank; expected text to look for; got ['ok', ' ']",
        ),
        (
            GOOD + "boot:\n  sanity_expect: 're:(a+)+$'\n",
            f"boot.sanity_expect: regex '(a+)+$' has a repeat inside a repeat: {RANGE}"
            "quantifier or alternatives; got 're:(a+)+$'",
        ),
        (
            GOOD.replace("path: M", "path: ../../../etc"),
            "model.path: a '..' component climbs out of box.models_dir; name the directory; "
            "got '../../../etc'",
        ),
        (
            CPU + "serve:\n  entrypoint: ['+/usr/bin/python3', '-m', 'x']\n",
            "serve.entrypoint: [0]: expected an absolute path (or one under {home} / {cache}) or "
            "a command name: letters, digits and ._+-/ only; got ['+/usr/bin/python3', '-m', 'x']",
        ),
        (
            CPU + "serve:\n  entrypoint: ['/usr/bin/py\"thon3']\n",
            "serve.entrypoint: [0]: expected an absolute path (or one under {home} / {cache}) or "
            "a command name: letters, digits and ._+-/ only; got ['/usr/bin/py\"thon3']",
        ),
        (
            GOOD + "box:\n  models_dir: '/srv/models\\'\n",
            "box.models_dir: a path may not contain a backslash (systemd reads it as an escape); "
            "got '/srv/models\\\\'",
        ),
        (
            GOOD + "box:\n  cache_root: /srv/my cache\n",
            "box.cache_root: a mounted directory may not contain blanks; got '/srv/my cache'",
        ),
    ],
    ids=[
        "tp-64-on-cpu",
        "negative-temperature",
        "unknown-generation-key",
        "fractional-top-k",
        "blank-sanity-expect",
        "blank-expect",
        "nested-quantifier",
        "model-path-climbs-out",
        "privileged-exec-prefix",
        "quote-in-executable",
        "backslash-ends-models-dir",
        "blank-in-mounted-dir",
    ],
)
def test_accepted_bad_values_are_refused(profile_dir: Path, text: str, problem: str) -> None:
    (profile_dir / "cpu-demo.yaml").write_text((SHIPPED / "cpu-demo.yaml").read_text())
    assert _problems(profile_dir, text) == [problem]


@pytest.mark.parametrize(
    "pattern", ["(a+)+$", "(a|a)*", r"(\w+\s?)+$", "((a)+)+", "(?=(a+)+)", "(a?)+", "(?>(a+)+b)"]
)
def test_patterns_that_backtrack_exponentially_are_named(pattern: str) -> None:
    assert checks.backtracking(pattern) is not None


@pytest.mark.parametrize(
    "pattern",
    [r"kernels=precompiled:[1-9]\d* jit:0", r"\bcold\b", r"^\s*(yes|no)\b", r"method=nvfp4_\w+"],
)
def test_the_shipped_and_tested_patterns_pass(pattern: str) -> None:
    assert checks.backtracking(pattern) is None


def test_a_name_with_a_trailing_newline_stays_on_one_line(profile_dir: Path) -> None:
    (profile_dir / "cpu-demo.yaml").write_text((SHIPPED / "cpu-demo.yaml").read_text())
    with pytest.raises(ProfileError) as info:
        profiles.load("cpu-demo\n", profile_dir)
    # Before: "$DIR/cpu-demo\n.yaml: no such profile (...)", over two lines.
    assert info.value.problems == [
        "'cpu-demo\\n': profile names are lowercase letters, digits and '-' (at most 64)"
    ]


@pytest.mark.parametrize("program", ["+/usr/bin/python3", "-/usr/bin/python3", "!!/bin/x", ""])
def test_the_renderer_refuses_a_prefix_before_the_program_too(program: str) -> None:
    # A Profile built without profiles.load (the boundary above refuses these first).
    from paroctl.errors import RenderError
    from paroctl.serve import render

    prof = profiles.load("cpu-demo", SHIPPED)
    serve = prof.body.serve.model_copy(update={"entrypoint": (program, "-m", "x")})
    body = prof.body.model_copy(update={"serve": serve})
    with pytest.raises(RenderError, match="as the program of an ExecStart= line"):
        render.render(prof.model_copy(update={"body": body}), "service")
