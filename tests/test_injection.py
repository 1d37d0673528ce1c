"""Unit-file injection: control characters and hostile values refused at the profile boundary,
and the renderer refusing or escaping them again when a Profile bypasses it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from paroctl.errors import ProfileError, RenderError
from paroctl.profile import checks, profiles
from paroctl.serve import render

SHIPPED = Path(__file__).resolve().parents[1] / "profiles"

# C0 (tab included: it is refused outside free text), DEL and C1. (NEL, U+2028 and U+2029 are
# line breaks to YAML itself, folded to spaces when a scalar is read: see the checks test below.)
CONTROL = [chr(c) for c in range(0x20)] + ["\x7f", "\x80", "\x9f"]
GOOD_BODY = """\
description: test profile
extends: _r9700
model:
  path: M
  served_names: [m]
"""


def _plain(node: Any) -> Any:
    """A model dump as YAML-safe data (tuples as lists)."""
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [_plain(v) for v in node]
    return node


def _string_fields(node: Any, loc: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], bool]]:
    """(location, is_key) of every string value, and of every key under env/knobs."""
    out: list[tuple[tuple[Any, ...], bool]] = []
    if isinstance(node, str):
        out.append((loc, False))
    elif isinstance(node, dict):
        for key, value in node.items():
            if loc in (("env",), ("knobs",)):
                out.append(((*loc, key), True))
            out += _string_fields(value, (*loc, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _string_fields(value, (*loc, index))
    return out


def _inject(doc: Any, loc: tuple[Any, ...], is_key: bool, char: str) -> Any:
    parent = doc
    for part in loc[:-1]:
        parent = parent[part]
    if is_key:
        parent[f"{loc[-1]}{char}X"] = parent.pop(loc[-1])
        return (*loc[:-1], f"{loc[-1]}{char}X")
    parent[loc[-1]] = f"{parent[loc[-1]]}{char}[Service]{char}ExecStartPre=/bin/sh -c id"
    return loc


def _write(directory: Path, name: str, doc: Any) -> None:
    (directory / f"{name}.yaml").write_text(yaml.safe_dump(doc, allow_unicode=True))


@pytest.mark.parametrize("name", profiles.list_names(SHIPPED))
def test_every_string_of_every_shipped_profile_refuses_control_characters(
    profile_dir: Path, name: str
) -> None:
    shipped = profiles.load(name, SHIPPED)
    base = _plain(shipped.body.model_dump(mode="python"))
    fields = _string_fields(base)
    assert len(fields) > 15, "the dump lost the profile's strings"
    for index, (loc, is_key) in enumerate(fields):
        tab_ok = loc[:1] == ("description",) or loc[:2] in profiles.TAB_OK
        chars = [c for c in CONTROL if not (tab_ok and c == "\t")]
        char = chars[index % len(chars)]  # across the fields every character gets its turn
        doc = _plain(shipped.body.model_dump(mode="python"))
        where = _inject(doc, loc, is_key, char)
        _write(profile_dir, "inj", doc)
        with pytest.raises(ProfileError) as info:
            profiles.load("inj", profile_dir)
        dotted = ".".join(str(p) for p in where)
        assert any(
            f"inj.yaml: {dotted}: " in p and f"control character U+{ord(char):04X}" in p
            for p in info.value.problems
        ), (name, dotted, repr(char), info.value.problems)


# A tab is allowed in the description (it cannot end a unit line): every other control character.
NOT_TAB = [c for c in CONTROL if c != "\t"]


@pytest.mark.parametrize("char", NOT_TAB, ids=[f"U+{ord(c):04X}" for c in NOT_TAB])
def test_the_issue_description_payload_is_refused_with_every_character(
    profile_dir: Path, char: str
) -> None:
    payload = f"t{char}[Service]{char}ExecStartPre=/bin/sh -c id"
    (profile_dir / "bad.yaml").write_text(
        GOOD_BODY.replace("test profile", yaml.safe_dump(payload).split("\n...")[0].strip())
    )
    with pytest.raises(ProfileError) as info:
        profiles.load("bad", profile_dir)
    assert any(
        f"bad.yaml: description: value contains control character U+{ord(char):04X}" in p
        for p in info.value.problems
    ), info.value.problems


BAD_VALUES = [
    ("trailing backslash in Description=", "description: 'ends in \\'\n", "description"),
    ("CR in an env value", 'env:\n  NCCL_DEBUG: "INFO\\rLD_PRELOAD=/x.so"\n', "env.NCCL_DEBUG"),
    ("newline in an env key", 'env:\n  "NCCL_X\\nLD_PRELOAD": "1"\n', "env.NCCL_X\nLD_PRELOAD"),
    ("image ref as a flag", "image:\n  ref: --privileged\n", "image.ref"),
    ("device outside /dev", "container:\n  devices: [/]\n", "container.devices.0"),
    ("/dev/mem", "container:\n  devices: [/dev/mem]\n", "container.devices.0"),
    ("/dev/ escape", "container:\n  devices: [/dev/../etc/shadow]\n", "container.devices.0"),
    ("relative etc_dir", "box:\n  etc_dir: etc\n", "box.etc_dir"),
    ("relative secrets file", "container:\n  secrets_env_file: s.env\n", "container.secrets_env_file"),
    ("a volume spec as models_dir", "box:\n  models_dir: '/:/host:rw'\n", "box.models_dir"),
    ("served name as a flag", "model:\n  path: M\n  served_names: [--api-key]\n",
     "model.served_names.0"),
    ("NaN utilisation", "serve:\n  gpu_memory_utilization: .nan\n", "serve.gpu_memory_utilization"),
    ("inf sampling", "serve:\n  generation_override: {temperature: .inf}\n",
     "serve.generation_override"),
    ("inf band", "gates:\n  decode:\n    max_ms_per_step: {25: .inf}\n", "gates.decode.max_ms_per_step.25"),
    ("timeout systemd cannot parse", "serve:\n  boot_timeout_s: 1000000000000000000000000000000\n",
     "serve.boot_timeout_s"),
    ("stop grace of a year", "container:\n  stop_grace_s: 31536000\n", "container.stop_grace_s"),
    ("TP 128", "serve:\n  tensor_parallel_size: 128\n", "serve.tensor_parallel_size"),
    ("absurd context", "serve:\n  max_model_len: 1000000000\n", "serve.max_model_len"),
    ("bool as a port", "serve:\n  port: true\n", "serve.port"),
    ("KLD against itself", "gates:\n  kld: {reference: bad, max_mean_kl: 0.1, min_top1: 0.5}\n",
     "gates.kld.reference"),
    ("KLD against nothing", "gates:\n  kld: {reference: nope, max_mean_kl: 0.1, min_top1: 0.5}\n",
     "gates.kld.reference"),
    ("empty entrypoint (validated, then crashed render)", "serve:\n  entrypoint: []\n",
     "serve.entrypoint"),
    ("non-string env key", "env:\n  1: x\n", "env.1"),
    ("non-string knob key", "knobs:\n  true: x\n", "knobs.True"),
    ("sexagesimal port (YAML 1.1: 8043)", "serve:\n  port: 2:14:03\n", "serve.port"),
    ("octal port (YAML 1.1: 511)", "serve:\n  port: 0777\n", "serve.port"),
    ("fullwidth shm size", "container:\n  shm_size: '１６g'\n", "container.shm_size"),
    ("managed flag, underscores", "serve:\n  extra_args: ['--max_model_len=99']\n", "serve.extra_args"),
    ("managed flag, short alias", "serve:\n  extra_args: [-tp, '8']\n", "serve.extra_args"),
    ("managed flag, -q", "serve:\n  extra_args: [-q, fp8]\n", "serve.extra_args"),
    ("managed flag, a prefix", "serve:\n  extra_args: ['--max-model=99']\n", "serve.extra_args"),
    ("fullwidth int knob", "knobs:\n  PARO_DECODE_MAX_M: '１６'\n", "knobs.PARO_DECODE_MAX_M"),
]  # fmt: skip


def _body(extra: str) -> str:
    """GOOD_BODY with `extra` appended, minus the top-level sections extra replaces (a repeated
    key is itself an error now)."""
    replaced = {line.split(":")[0] for line in extra.splitlines() if not line.startswith(" ")}
    kept: list[str] = []
    skipping = False
    for line in GOOD_BODY.splitlines(keepends=True):
        if not line.startswith(" "):
            skipping = line.split(":")[0] in replaced
        if not skipping:
            kept.append(line)
    return "".join(kept) + extra


@pytest.mark.parametrize(("case", "extra", "key"), BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_hostile_values_are_refused_naming_file_and_key(
    profile_dir: Path, case: str, extra: str, key: str
) -> None:
    (profile_dir / "bad.yaml").write_text(_body(extra))
    with pytest.raises(ProfileError) as info:
        profiles.load("bad", profile_dir)
    assert any(p.startswith(f"{profile_dir}/bad.yaml: {key}: ") for p in info.value.problems), (
        info.value.problems
    )


def test_accelerator_devices_and_placeholder_paths_still_validate(profile_dir: Path) -> None:
    extra = (
        "container:\n  devices: [/dev/kfd, /dev/dri/renderD128, /dev/dri/card1]\n"
        "box:\n  etc_dir: '{home}/etc'\n"
    )
    (profile_dir / "ok.yaml").write_text(GOOD_BODY + extra)
    assert profiles.load("ok", profile_dir).body.container.devices[1] == "/dev/dri/renderD128"


def _with(prof: profiles.Profile, section: str | None, **changes: Any) -> profiles.Profile:
    """A Profile with fields changed past validation (what the renderer must still defend)."""
    body = prof.body
    if section is None:
        body = body.model_copy(update=changes)
    else:
        part = getattr(body, section).model_copy(update=changes)
        body = body.model_copy(update={section: part})
    return prof.model_copy(update={"body": body})


EVIL = "x\n[Service]\nExecStartPre=/bin/sh -c id"


@pytest.mark.parametrize(
    ("section", "field", "value", "fmt"),
    [
        (None, "description", EVIL, "service"),
        (None, "description", "ends in \\", "quadlet"),
        ("box", "etc_dir", "/etc" + EVIL, "quadlet"),
        ("container", "secrets_env_file", "/s.env" + EVIL, "service"),
        ("image", "ref", "img" + EVIL, "quadlet"),
        ("container", "devices", ("/dev/kfd" + EVIL,), "quadlet"),
    ],
)
def test_renderer_refuses_line_breaks_that_bypass_validation(
    section: str | None, field: str, value: Any, fmt: render.Format
) -> None:
    prof = _with(profiles.load("paro-int5"), section, **{field: value})
    with pytest.raises(RenderError, match="refusing to render"):
        render.render(prof, fmt)


def test_renderer_refuses_a_carriage_return_in_the_env_file() -> None:
    prof = profiles.load("paro-int5")
    prof = prof.model_copy(update={"env": {**prof.env, "NCCL_DEBUG": "INFO\rLD_PRELOAD=/x.so"}})
    with pytest.raises(RenderError, match="env file"):
        render.render(prof, "env")


def test_renderer_escapes_specifiers_and_quotes_control_characters() -> None:
    prof = _with(profiles.load("cpu-demo"), None, description="100% %n of it")
    unit = render.render(prof, "service").content
    assert "Description=paroctl serve cpu-demo: 100%% %%n of it\n" in unit
    assert render.systemd_join(["a b\nc", 'q"\\']) == '"a b\\x0ac" "q\\"\\\\"'


def test_unicode_line_separators_are_control_characters_too() -> None:
    found = checks.text_problems({"a": "x\u2028y", "b": ["\x85"], "c": {"k\u2029": 1}})
    assert [loc for loc, _ in found] == [("a",), ("b", "0"), ("c", "k\u2029")]
