"""Gate data: GSM8K (test + train for few-shot) and WikiText-2, from a path, the copy paroctl
ships, the cache, or online.

Lookup order: an explicit path (--data, --corpus); PAROCTL_DATA_DIR (a directory holding gsm8k/
and wikitext2/, the layout CI and air-gapped boxes provide); the download cache under
PAROCTL_CACHE (a box that fetched once keeps gating the same bytes); the copy shipped with paroctl
(the repository's tests/data, with its licences: no flag and no network needed, so the README's
demo gates an offline box); otherwise one download from the public source into that cache.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

from paroctl import env, state
from paroctl.errors import DataError

GSM8K_URL = "https://raw.githubusercontent.com/openai/grade-school-math/master/grade_school_math/data/{split}.jsonl"
WIKITEXT2_URL = "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-raw-v1.zip"
WIKITEXT2_MEMBER = "wikitext-2-raw/wiki.test.raw"


@dataclass(frozen=True)
class Question:
    """One GSM8K problem: its index in the split, question and reference answer text."""

    index: int
    question: str
    answer: str


# The flag that names each data set's path, for the hint when it cannot be found.
FLAGS = {"gsm8k": "--data", "wikitext2": "--corpus"}
# Where the shipped copy sits: `data` in a wheel, `tests/data` in a checkout (the same files).
SHIPPED = ("data", "tests/data")


def _data_dirs() -> list[Path]:
    """Directories holding gsm8k/ and wikitext2/: PAROCTL_DATA_DIR, the cache, the shipped copy."""
    value = env.get("PAROCTL_DATA_DIR")
    dirs = [Path(value).expanduser()] if value else []
    return [*dirs, _cache(), *(state.resource_path(name) for name in SHIPPED)]


def _found(relative: str) -> Path | None:
    return next((d / relative for d in _data_dirs() if (d / relative).is_file()), None)


def _cache() -> Path:
    return state.cache_dir() / "data"


def _download(url: str, dataset: str) -> bytes:
    import requests

    try:
        response = requests.get(url, timeout=(10, 120))
        response.raise_for_status()
    except requests.RequestException as exc:
        raise DataError(
            f"cannot download {url} ({exc}); offline? pass {FLAGS[dataset]} PATH or set "
            f"PAROCTL_DATA_DIR to a directory holding {dataset}/"
        ) from exc
    return response.content


def gsm8k_file(split: str, path: Path | None = None) -> Path:
    """The JSONL file of a GSM8K split ('test' or 'train'), fetching it once if needed."""
    if path is not None:
        path = path.expanduser()
        if path.is_dir():
            path = path / f"{split}.jsonl"
        elif split != "test":
            # --data names the test file; its train split sits beside it.
            path = path.with_name(f"{split}.jsonl")
        if not path.is_file():
            raise DataError(f"{path}: no GSM8K {split} split there")
        return path
    found = _found(f"gsm8k/{split}.jsonl")
    if found is not None:
        return found
    cached = _cache() / "gsm8k" / f"{split}.jsonl"
    state.atomic_write(cached, _download(GSM8K_URL.format(split=split), "gsm8k"))
    return cached


def load_gsm8k(split: str, path: Path | None = None) -> list[Question]:
    """Every question of a GSM8K split, in file order."""
    file = gsm8k_file(split, path)
    questions: list[Question] = []
    for number, line in enumerate(file.read_text().splitlines()):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            questions.append(Question(len(questions), str(row["question"]), str(row["answer"])))
        except (ValueError, KeyError, TypeError) as exc:
            raise DataError(f"{file}:{number + 1}: not a GSM8K row ({exc})") from exc
    if not questions:
        raise DataError(f"{file}: no questions")
    return questions


def wikitext2_file(path: Path | None = None) -> Path:
    """WikiText-2 (raw) test text, fetching and caching it once if needed."""
    if path is not None:
        path = path.expanduser()
        path = path / "wiki.test.raw" if path.is_dir() else path
        if not path.is_file():
            raise DataError(f"{path}: no WikiText-2 text there")
        return path
    found = _found("wikitext2/wiki.test.raw")
    if found is not None:
        return found
    cached = _cache() / "wikitext2" / "wiki.test.raw"
    with zipfile.ZipFile(io.BytesIO(_download(WIKITEXT2_URL, "wikitext2"))) as archive:
        state.atomic_write(cached, archive.read(WIKITEXT2_MEMBER))
    return cached


def load_corpus(path: Path | None = None) -> str:
    """The WikiText-2 test text the timing gates cut their prompts from."""
    return wikitext2_file(path).read_text(encoding="utf-8")
