"""paroctl/env.py is the one place paroctl reads the environment, and its table is complete."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from paroctl import env
from paroctl.cli import docs

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "paroctl"
# Modules allowed to read os.environ besides env.py, each with why (none: state.env went, its
# callers read paroctl.env).
ALLOWED_READERS: dict[str, str] = {}
READS = {"environ", "environb", "getenv", "getenvb"}
NAME = re.compile(r"\bPAROCTL_[A-Z0-9_]*[A-Z0-9]")


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(REPO).as_posix(), ast.parse(path.read_text(), str(path))


def _os_reads(tree: ast.Module) -> list[int]:
    """Lines that read the environment through os: os.environ, os.getenv (any alias of os), or
    `from os import environ/getenv`."""
    aliases = {"os"}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname or a.name for a in node.names if a.name == "os"}
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            lines += [node.lineno for a in node.names if a.name in READS]
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in READS
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            lines.append(node.lineno)
    return sorted(lines)


def _strings(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


def test_only_env_py_reads_the_environment() -> None:
    readers = {}
    for name, tree in _modules():
        if name != "paroctl/env.py" and name not in ALLOWED_READERS and _os_reads(tree):
            readers[name] = _os_reads(tree)
    assert readers == {}, f"read the environment through paroctl.env.get instead: {readers}"


def test_the_check_sees_a_read() -> None:
    code = "import os as o\nfrom os import getenv\nx = o.environ.get('A')\ns = 'os.environ'\n"
    assert _os_reads(ast.parse(code)) == [2, 3]


def test_allowed_readers_still_read() -> None:
    """A stale allow-list entry hides nothing today but would hide tomorrow's read."""
    trees = dict(_modules())
    assert all(_os_reads(trees[name]) for name in ALLOWED_READERS)


def test_every_paroctl_name_spelled_in_the_package_is_in_the_table() -> None:
    spelled = {
        (name, m) for name, tree in _modules() for s in _strings(tree) for m in NAME.findall(s)
    }
    unknown = sorted(f"{name}: {var}" for name, var in spelled if var not in env.TABLE)
    assert unknown == [], "add these to paroctl/env.py's table (or fix the spelling)"


def test_every_variable_in_the_table_is_read_somewhere() -> None:
    spelled = {s for name, tree in _modules() if name != "paroctl/env.py" for s in _strings(tree)}
    assert sorted(set(env.TABLE) - spelled) == []


def test_table_entries_are_unique_and_one_line() -> None:
    assert len(env.TABLE) == len(env.VARIABLES)
    for variable in env.VARIABLES:
        assert variable.doc and "\n" not in variable.doc and "|" not in variable.doc, variable.name


def test_get_refuses_a_name_not_in_the_table() -> None:
    with pytest.raises(env.UnknownVariable, match="PAROCTL_NOT_A_VARIABLE"):
        env.get("PAROCTL_NOT_A_VARIABLE")


def test_get_reads_and_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAROCTL_HOME", "/srv/paroctl")
    assert env.get("PAROCTL_HOME") == "/srv/paroctl"
    monkeypatch.setenv("PAROCTL_HOME", "")  # set but empty counts as unset
    assert env.get("PAROCTL_HOME") == "~/.local/share/paroctl"
    assert env.get("PAROCTL_HOME", "/elsewhere") == "/elsewhere"
    monkeypatch.delenv("PAROCTL_UNIT_DIR", raising=False)
    assert env.get("PAROCTL_UNIT_DIR") is None


def test_environ_is_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAROCTL_DEBUG", "1")
    copy = env.environ()
    assert copy["PAROCTL_DEBUG"] == "1"
    assert isinstance(copy, dict)
    copy["PAROCTL_DEBUG"] = "0"  # type: ignore[index]
    assert env.get("PAROCTL_DEBUG") == "1"


def test_env_py_imports_nothing_from_paroctl_but_errors() -> None:
    tree = ast.parse((PACKAGE / "env.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert {m for m in imported if m and m.startswith("paroctl")} <= {"paroctl.errors"}


def test_environment_page_is_current() -> None:
    page = REPO / "docs" / "environment.md"
    assert page.read_text() == docs.environment_markdown(), (
        "docs/environment.md is stale: run "
        "`.venv/bin/python -m paroctl.cli.docs environment > docs/environment.md`"
    )
