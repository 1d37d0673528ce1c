"""Bounded loading: hostile files fail fast with one clear, short message, and never stop the rest."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from click.testing import CliRunner

from paroctl.cli.main import cli
from paroctl.errors import ProfileError
from paroctl.profile import profiles

Deadline = Callable[[float], AbstractContextManager[None]]

GOOD_BODY = "description: t\nextends: _cpu\nmodel:\n  path: M\n  served_names: [m]\n"
# The 496-byte kind: nine levels of nine aliases, 9^9 strings once expanded.
ALIAS_BOMB = (
    "".join(
        f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9) if i else ', '.join(['lol'] * 9)}]\n"
        for i in range(9)
    )
    + "description: *l8\n"
)


def _problems(directory: Path, name: str, deadline: Deadline) -> list[str]:
    with deadline(5), pytest.raises(ProfileError) as info:
        profiles.load(name, directory)
    assert all(len(p) <= 600 for p in info.value.problems), "a message was not truncated"
    return info.value.problems


def _write(directory: Path, name: str, text: str) -> None:
    (directory / f"{name}.yaml").write_text(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (ALIAS_BOMB, "expands to more than 20000 values (YAML aliases?)"),
        ("a: &a [*a]\n", "alias *a is undefined or refers to itself"),
        ("a: " + "[" * 1000 + "]" * 1000 + "\n", "nested deeper than 32 levels"),
        ("".join(" " * i + "b:\n" for i in range(1100)), "nested deeper than 32 levels"),
        ("a: " + "[" * 40 + "]" * 40 + "\n", "nested deeper than 32 levels"),
        ("description: x\ndescription: y\n", "duplicate key 'description' at line 2"),
        ("serve:\n  port: 1\n  port: 2\n", "duplicate key 'port' at line 3"),
        ("a: " + "9" * 5000 + "\n", "a value cannot be constructed"),
        ("a: !!int abc\n", "a value cannot be constructed"),
        ("box: !!timestamp x\n", "a value cannot be constructed"),
        ("description: !!bool maybe\n", "a value cannot be constructed"),
    ],
    ids=["alias bomb", "recursive alias", "deep nesting", "deep block nesting", "41 levels", "duplicate key", "nested dup",
         "5000-digit int", "bad int tag", "bad timestamp (found by the fuzz)",
         "bad bool (found by the fuzz)"],
)  # fmt: skip
def test_hostile_yaml_is_refused_quickly(
    profile_dir: Path, text: str, expected: str, deadline: Deadline
) -> None:
    _write(profile_dir, "bad", text)
    problems = _problems(profile_dir, "bad", deadline)  # the deadline bounds a hang, not a speed
    assert len(problems) == 1 and problems[0].startswith(f"{profile_dir}/bad.yaml: {expected}")


def test_a_fifo_is_refused_without_blocking(profile_dir: Path, deadline: Deadline) -> None:
    os.mkfifo(profile_dir / "fifo.yaml")
    assert _problems(profile_dir, "fifo", deadline) == [
        f"{profile_dir}/fifo.yaml: not a regular file (a FIFO); a profile is a plain file"
    ]


def test_a_device_is_refused_without_reading_it(profile_dir: Path, deadline: Deadline) -> None:
    (profile_dir / "zero.yaml").symlink_to("/dev/zero")
    assert _problems(profile_dir, "zero", deadline) == [
        f"{profile_dir}/zero.yaml: not a regular file (a character device); a profile is a plain file"
    ]


def test_a_huge_file_is_refused_by_its_size(profile_dir: Path, deadline: Deadline) -> None:
    _write(profile_dir, "big", "# " + "x" * (2 << 20) + "\n")
    [problem] = _problems(profile_dir, "big", deadline)
    assert problem.endswith("bytes; a profile is at most 1048576 bytes")


def test_long_values_are_truncated_in_messages(profile_dir: Path, deadline: Deadline) -> None:
    _write(profile_dir, "bad", GOOD_BODY + "serve:\n  mode: " + "z" * 10_000 + "\n")
    [problem] = _problems(profile_dir, "bad", deadline)
    assert re.search(r"; got 'z{20,30}\.\.\.z{20,30}'$", problem) and len(problem) < 300


def test_an_over_long_name_is_a_clean_error(profile_dir: Path, deadline: Deadline) -> None:
    [problem] = _problems(profile_dir, "a" * 300, deadline)
    assert "profile names are lowercase letters, digits and '-' (at most 64)" in problem


def test_extends_is_memoised_and_depth_capped(
    profile_dir: Path, monkeypatch: pytest.MonkeyPatch, deadline: Deadline
) -> None:
    # A diamond six levels deep: 2^6 paths to the bottom, but each file is read once.
    for level in range(5):
        for side in "ab":
            _write(profile_dir, f"_d{level}{side}", f"extends: [_d{level + 1}a, _d{level + 1}b]\n")
    _write(profile_dir, "_d5a", "extends: _cpu\n")
    _write(profile_dir, "_d5b", "")
    _write(profile_dir, "dia", GOOD_BODY.replace("_cpu", "[_d0a, _d0b]"))
    reads: list[Path] = []
    real_read = profiles._read
    monkeypatch.setattr(profiles, "_read", lambda p: reads.append(p) or real_read(p))
    with deadline(5):
        assert profiles.load("dia", profile_dir).body.box.name == "cpu"
    assert len(reads) == len(set(reads)) == 1 + 12 + 1
    for level in range(12):
        _write(profile_dir, f"_c{level}", f"extends: _c{level + 1}\n")
    _write(profile_dir, "_c12", "")
    _write(profile_dir, "chain", "extends: _c0\n")
    assert _problems(profile_dir, "chain", deadline) == [
        f"{profile_dir}/chain.yaml: extends: deeper than 8 levels"
    ]


def test_one_bad_file_never_stops_list_or_validate_all(
    profile_dir: Path, deadline: Deadline
) -> None:
    _write(profile_dir, "good", GOOD_BODY)
    _write(profile_dir, "bomb", ALIAS_BOMB)
    os.mkfifo(profile_dir / "fifo.yaml")
    _write(profile_dir, "zz-good", GOOD_BODY)
    runner = CliRunner()
    with deadline(10):
        listed = runner.invoke(cli, ["profile", "list"])
        validated = runner.invoke(cli, ["profile", "validate", "--all"])
    assert listed.exit_code == 0, listed.output
    lines = listed.output.splitlines()
    assert [line.split()[0] for line in lines] == ["bomb", "fifo", "good", "zz-good"]
    assert "INVALID" in lines[0] and "INVALID" in lines[1] and "INVALID" not in lines[2]
    assert validated.exit_code == 2
    assert "ok  good  " in validated.output and "ok  zz-good  " in validated.output
    assert "bomb.yaml: expands to more than" in validated.output
    assert "fifo.yaml: not a regular file (a FIFO)" in validated.output


def test_an_unreadable_vllm_envs_py_does_not_break_loading(
    profile_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    envs = tmp_path / "envs.py"
    envs.write_bytes(b"environment_variables = {'VLLM_X': 1}\n# \xff\xfe not UTF-8\n")
    monkeypatch.setenv("PAROCTL_VLLM_ENVS", str(envs))
    _write(profile_dir, "good", GOOD_BODY)
    assert profiles.load("good", profile_dir).name == "good"
