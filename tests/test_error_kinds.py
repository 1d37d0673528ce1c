"""Errors by kind (paroctl/errors.py): StateError for PAROCTL_HOME and its files, UsageError for a
command that names what does not exist or cannot apply, DataError for missing or malformed input
data. All exit 2 (tests/test_exit_codes.py holds the codes); these hold the classes."""

from __future__ import annotations

from pathlib import Path

import pytest

from paroctl import state
from paroctl.errors import EXIT_CANNOT_RUN, DataError, StateError, UsageError
from paroctl.gates import base, data, run_gate
from paroctl.profile import profiles
from paroctl.switch import switch
from paroctl.switch.record import Deps


def test_every_kind_exits_as_before() -> None:
    assert {cls.exit_code for cls in (StateError, UsageError, DataError)} == {EXIT_CANNOT_RUN}


def test_asking_for_what_is_not_there_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no gate 'nope'"):
        run_gate("nope")
    with pytest.raises(UsageError, match=r"^nothing is live"):
        base.read_target_record()
    with pytest.raises(UsageError, match="no interrupted switch to resume"):
        switch.resume(Deps(runtime_for=switch.default_runtime), load_profile=profiles.load)


def test_missing_or_malformed_data_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no GSM8K test split there"):
        data.gsm8k_file("test", tmp_path)
    rows = tmp_path / "test.jsonl"
    rows.write_text("not json\n")
    with pytest.raises(DataError, match="not a GSM8K row"):
        data.load_gsm8k("test", rows)


def test_a_damaged_state_file_is_a_state_error() -> None:
    state.live_path().parent.mkdir(parents=True, exist_ok=True)
    state.live_path().write_text("{not json")
    with pytest.raises(StateError):
        state.read_live()
