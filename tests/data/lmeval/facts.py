"""The local dataset of the paroctl_facts tasks: facts.jsonl beside this file, loaded without
the Hugging Face hub (lm-eval calls `custom_dataset` instead of `datasets.load_dataset`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def load(**_: Any) -> Any:
    """{"test": the twelve facts} as a datasets.DatasetDict (lm-eval passes its metadata in)."""
    import datasets

    return datasets.load_dataset("json", data_files={"test": str(HERE / "facts.jsonl")})
