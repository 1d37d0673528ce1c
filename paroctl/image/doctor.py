"""`paroctl image doctor`: run images/doctor.py inside a built image against its labels.

The script is the checkout's (passed with `python3 -c`), so an image built before a check was
added is checked too. A result is cached per image id and script digest under PAROCTL_HOME: the
switch calls `doctor_once` before every engine boot and pays the ~15-40 s once per image.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from paroctl import state
from paroctl.errors import EXIT_GATE_FAILED, RuntimeFailure
from paroctl.image.labels import (
    LABEL_KERNELS,
    LABEL_PLUGIN,
    LABEL_SHA,
    LABEL_TORCH,
    LABEL_TRITON,
    LABEL_TRITON_SERIES,
    LABEL_VLLM,
    image_info,
    images_dir,
)
from paroctl.serve import engine

SCRIPT = "doctor.py"
PREFIX = "paroctl doctor: "
RUN_TIMEOUT_S = 600.0


class ImageMismatch(RuntimeFailure):
    """The image is not what its labels claim, or vLLM would not find the plugin in it."""

    exit_code = EXIT_GATE_FAILED


@dataclass(frozen=True)
class DoctorResult:
    """What the doctor found in one image: ok, the first mismatch, its JSON report."""

    image_id: str
    ok: bool
    first_mismatch: str | None
    report: dict[str, Any] = field(default_factory=dict)
    cached: bool = False

    def raise_for_mismatch(self, ref: str) -> None:
        """ImageMismatch (exit 1) naming the first mismatch, unless the image passed."""
        if not self.ok:
            raise ImageMismatch(f"image {ref} ({self.image_id[:19]}): {self.first_mismatch}")


def script_text() -> str:
    """The doctor script shipped in images/."""
    return (images_dir() / SCRIPT).read_text()


def doctor_args(labels: Mapping[str, str]) -> list[str]:
    """The doctor's expectations from an image's paroctl labels (pure); absent labels: unchecked."""
    vllm = labels.get(LABEL_VLLM, "")
    wanted = {
        "--vllm": vllm.split("==")[-1],
        "--plugin": labels.get(LABEL_PLUGIN, ""),
        "--kernels": labels.get(LABEL_KERNELS, ""),
        "--torch": labels.get(LABEL_TORCH, ""),
        "--triton-min": labels.get(LABEL_TRITON, ""),
        "--triton-series": labels.get(LABEL_TRITON_SERIES, ""),
        "--source-sha": labels.get(LABEL_SHA, ""),
    }
    return [part for flag, value in wanted.items() if value for part in (flag, value)]


def parse(image_id: str, returncode: int, stdout: str, stderr: str) -> DoctorResult:
    """A doctor run's result from its streams (pure); RuntimeFailure when it did not run."""
    lines = [line[len(PREFIX) :] for line in stdout.splitlines() if line.startswith(PREFIX)]
    report = next((json.loads(line) for line in lines if line.startswith("{")), None)
    if returncode not in (0, 1) or report is None:
        raise RuntimeFailure(
            f"the doctor did not run in {image_id[:19]} (exit {returncode}): "
            f"{(stderr or stdout).strip()[-2000:]}"
        )
    problems = list(report.get("problems", []))
    if returncode == 1 and not problems:
        raise RuntimeFailure(f"the doctor failed in {image_id[:19]} without a finding: {stderr}")
    first = problems[0] if problems else None
    return DoctorResult(image_id, returncode == 0 and not problems, first, report)


def run_doctor(ref: str, api: engine.Api | None = None) -> DoctorResult:
    """Run the doctor in a throwaway container of ref, checked against ref's labels."""
    api = api or engine.Api(timeout_s=RUN_TIMEOUT_S)
    raw = api.inspect_image(ref)
    if raw is None:
        raise RuntimeFailure(f"no image {ref} in the engine at {api.base_url} (paroctl image list)")
    info = image_info(raw)
    argv = ["-c", script_text(), *doctor_args(info.labels)]
    done = api.run(info.id, argv, entrypoint=["python3"], timeout_s=RUN_TIMEOUT_S)
    return parse(info.id, done.returncode, done.stdout, done.stderr)


def _cache_path(image_id: str) -> Path:
    digest = hashlib.sha256(script_text().encode()).hexdigest()[:12]
    return state.home() / "doctor" / f"{image_id.removeprefix('sha256:')}-{digest}.json"


def doctor_once(ref: str, api: engine.Api | None = None) -> DoctorResult:
    """The doctor's result for ref's image id, run once per image id and doctor script."""
    api = api or engine.Api(timeout_s=RUN_TIMEOUT_S)
    raw = api.inspect_image(ref)
    if raw is None:
        raise RuntimeFailure(f"no image {ref} in the engine at {api.base_url} (paroctl image list)")
    path = _cache_path(str(raw["Id"]))
    try:
        return DoctorResult(**{**json.loads(path.read_text()), "cached": True})
    except (OSError, ValueError, TypeError):
        pass  # not run yet (or an unreadable entry): run it
    return _store(run_doctor(str(raw["Id"]), api))


def record(image_id: str, report_json: str) -> DoctorResult:
    """Cache the report a build's last step printed (it checked what the labels claim)."""
    report = json.loads(report_json)
    problems = list(report.get("problems", []))
    first = problems[0] if problems else None
    return _store(DoctorResult(image_id, not problems, first, report))


def _store(result: DoctorResult) -> DoctorResult:
    path = _cache_path(result.image_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    state.atomic_write(path, json.dumps(asdict(result), sort_keys=True) + "\n")
    return result
