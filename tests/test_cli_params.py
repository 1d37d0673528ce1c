"""paroctl/cli/params.py: FiniteFloat refuses what click.FloatRange lets through."""

from __future__ import annotations

import math

import click
import pytest
from click.testing import CliRunner

from paroctl.cli.params import FiniteFloat


@click.command()
@click.option("--timeout", type=FiniteFloat(min=1, max=86400))
def probe(timeout: float | None) -> None:
    click.echo(repr(timeout))


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "1e999"])
def test_nan_and_infinities_are_usage_errors(text: str) -> None:
    result = CliRunner().invoke(probe, ["--timeout", text])
    assert result.exit_code == 2
    assert "Invalid value for '--timeout'" in result.output


def test_click_floatrange_lets_nan_through() -> None:
    # Why the type exists: the option `switch --timeout` had (a wait that never ended).
    assert math.isnan(click.FloatRange(min=1).convert("nan", None, None))


@pytest.mark.parametrize(("text", "shown"), [("1", "1.0"), ("2.5", "2.5"), ("86400", "86400.0")])
def test_finite_numbers_in_range_pass(text: str, shown: str) -> None:
    assert CliRunner().invoke(probe, ["--timeout", text]).output == f"{shown}\n"


def test_the_range_still_holds() -> None:
    result = CliRunner().invoke(probe, ["--timeout", "0.5"])
    assert result.exit_code == 2 and "0.5 is not in the range 1<=x<=86400" in result.output
