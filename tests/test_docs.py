"""The docs: docs/cli.md is the real --help of every command; README and docs link to files that
exist and speak to an operator, not the team's history."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from paroctl.cli import docs
from paroctl.cli.main import SUBCOMMANDS, cli

REPO = Path(__file__).resolve().parents[1]
# The pages this check owns; docs/kernels.md and the frozen lab notebook keep their own rules.
PAGES = [REPO / "README.md", REPO / "CHANGELOG.md"] + [
    p for p in sorted((REPO / "docs").glob("*.md")) if p.name != "kernels.md"
]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
ORDINAL = r"\d+(?:st|nd|rd|th)|\w*(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|teenth|tieth)"
HISTORY = re.compile(rf"\b(?:stop|issue|pass) \d+|\b(?:{ORDINAL})(?: kernels)? pass\b", re.I)


def test_cli_page_is_current() -> None:
    assert (REPO / "docs" / "cli.md").read_text() == docs.cli_markdown(), (
        "docs/cli.md is stale: run `.venv/bin/python -m paroctl.cli.docs cli > docs/cli.md`"
    )


def test_cli_page_is_what_help_prints() -> None:
    """The generator's contexts print what `paroctl ... --help` prints in an 80-column terminal."""
    page = docs.cli_markdown()
    for args in (["--help"], ["gate", "sanity", "--help"], ["unit", "render", "--help"]):
        # prog_name as the console script names it; 78: click's width in an 80-column terminal
        result = CliRunner().invoke(cli, args, prog_name="paroctl", terminal_width=78)
        assert result.exit_code == 0
        assert f"```text\n{result.output.rstrip()}\n```" in page, args


def test_cli_page_covers_every_command() -> None:
    headings = set(re.findall(r"^## (.+)$", docs.cli_markdown(), re.M))
    assert {f"paroctl {name}" for name in SUBCOMMANDS} <= headings


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_links_resolve(page: Path) -> None:
    for target in LINK.findall(page.read_text()):
        if "://" not in target:
            assert (page.parent / target).exists(), f"{page.name}: broken link {target}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_pages_speak_to_an_operator(page: Path) -> None:
    text = page.read_text()
    assert HISTORY.findall(text) == [], "say the date and the machine, not the team's step"
    # Files outside the repository: a reader of the repository cannot open them.
    assert "ENVIRONMENT.md" not in text and "seed/" not in text and "seed log" not in text


def test_readme_is_a_front_door() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    # The two commands, exactly as .ci/run and a newcomer run them.
    assert (
        "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/paroctl demo run"
        in readme
    )
    assert "    bash tests/run.sh\n" in readme
