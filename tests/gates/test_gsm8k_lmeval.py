"""GSM8K prompts byte-identical to lm-evaluation-harness's own `gsm8k` task (v3.0), built offline.

lm-eval (pinned in the dev extra) builds its contexts from the repository's GSM8K copy: its task
config is read from the installed package and only the dataset is pointed at the local JSONL
files, then `build_all_requests` runs as `simple_evaluate` runs it (few-shot seed 1234 set after
the task is built). paroctl's prompts, chat turns and stop strings must match for the first 200
test documents.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from paroctl.gates import data, gsm8k

GSM8K = Path(__file__).resolve().parents[1] / "data" / "gsm8k"
DOCS = 200


def _lm_eval_task() -> Any:
    import lm_eval
    from lm_eval.api.task import ConfigurableTask

    config = yaml.safe_load((Path(lm_eval.__file__).parent / "tasks/gsm8k/gsm8k.yaml").read_text())
    assert config["metadata"]["version"] == 3.0
    files = {"train": str(GSM8K / "train.jsonl"), "test": str(GSM8K / "test.jsonl")}
    config.update(dataset_path="json", dataset_name=None, dataset_kwargs={"data_files": files})
    config.pop("tag", None)
    return ConfigurableTask(config=config)


def _requests(task: Any, chat: bool) -> list[tuple[str, dict[str, Any]]]:
    task.set_fewshot_seed(1234)  # as simple_evaluate does after building: its default seed

    def as_json(history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return json.dumps(history)  # the messages themselves, as lm-eval's API models send them

    kwargs: dict[str, Any] = (
        {"apply_chat_template": True, "fewshot_as_multiturn": True, "chat_template": as_json}
        if chat
        else {}
    )
    task.build_all_requests(limit=DOCS, rank=0, world_size=1, **kwargs)
    instances = sorted(task.instances, key=lambda inst: inst.doc_id)
    return [(inst.arguments[0], inst.arguments[1]) for inst in instances]


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """lm-eval's gsm8k task on the local files, with an empty Hugging Face home, offline."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf")))
        patch.setenv("HF_DATASETS_OFFLINE", "1")
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield _lm_eval_task()


def _paroctl_shots() -> tuple[list[data.Question], list[list[data.Question]]]:
    test = data.load_gsm8k("test", GSM8K)[:DOCS]
    train = data.load_gsm8k("train", GSM8K)
    picks = gsm8k.fewshot_indices(len(train), len(test))
    return test, [[train[i] for i in pick] for pick in picks]


def test_completion_prompts_and_stops_equal_lm_evals(task: Any) -> None:
    theirs = _requests(task, chat=False)
    test, shots = _paroctl_shots()
    assert len(theirs) == DOCS
    for question, mine, (context, gen) in zip(test, shots, theirs, strict=True):
        assert gsm8k.completion_prompt(question.question, mine) == context, question.index
        assert list(gsm8k.STOP) == gen["until"]
        assert gen["temperature"] == 0.0 and gen["do_sample"] is False


def test_chat_turns_equal_lm_evals_multiturn_fewshot(task: Any) -> None:
    theirs = _requests(task, chat=True)
    test, shots = _paroctl_shots()
    for question, mine, (context, gen) in zip(test, shots, theirs, strict=True):
        assert gsm8k.chat_messages(question.question, mine) == json.loads(context), question.index
        assert list(gsm8k.STOP) == gen["until"]


def test_shots_do_not_depend_on_how_many_questions_are_asked() -> None:
    # A resume or a shorter run asks question i exactly as a full run does.
    full = gsm8k.fewshot_indices(7473, DOCS)
    assert gsm8k.fewshot_indices(7473, 151)[150] == full[150]
    assert len({tuple(pick) for pick in full}) == DOCS and all(len(p) == 5 for p in full)
