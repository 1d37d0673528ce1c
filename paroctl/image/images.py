"""Container images with the compiled plugin: build requests, Containerfiles, contexts, builds.

A build renders `images/<kind>/Containerfile.j2`, builds the paro-kernels and paro-vllm wheels
from this checkout, adds (for cpu) a wheelhouse downloaded on the host, and builds through the
engine API (`engine.Api`: docker, or podman's socket via DOCKER_HOST) with provenance labels.
Everything inside the build installs offline: pip cannot reach an index from inside a build on
every box.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from paroctl import __version__, proc
from paroctl.errors import RenderError, RuntimeFailure
from paroctl.image import base, doctor, kernel_plans
from paroctl.image.base import checked_ref
from paroctl.image.kinds import DEFAULTS as DEFAULTS
from paroctl.image.kinds import KINDS as KINDS
from paroctl.image.kinds import KindDefaults as KindDefaults
from paroctl.image.labels import (
    LABEL,
    LABEL_BASE,
    LABEL_DIRTY,
    LABEL_KERNELS,
    LABEL_KIND,
    LABEL_PLUGIN,
    LABEL_REGISTRY,
    LABEL_SHA,
    LABEL_TORCH,
    LABEL_TRITON,
    LABEL_TRITON_SERIES,
    LABEL_VLLM,
    ImageInfo,
    image_info,
    images_dir,
    provenance_json,
)
from paroctl.image.wheels import (
    Progress,
    build_wheels,
    default_wheelhouse,
    ensure_wheelhouse,
    image_wheels,
    report,
    wheel_command,
    wheelhouse_command,
    wheelhouse_ready,
)
from paroctl.profile import knobs, profiles
from paroctl.serve import engine
from paroctl.versions import VERSIONS, VLLM_CPU_REMOVE, source_root
from paroctl.versions import Kind as Kind  # re-exported: callers name images.Kind

PROVENANCE_FILE = "provenance.json"  # in the build context; /opt/paroctl/ in the image
VENV = "/opt/vllm"
CONTEXT_SCRIPTS = ("verify.py", "doctor.py")  # images/ files every build context carries
# The CPU image's apt packages: the build stage makes a venv, the final stage only runs it.
CPU_BUILD_PACKAGES = ("python3", "python3-venv")
CPU_RUNTIME_PACKAGES = ("python3", "libnuma1", "libgomp1")
# docker: "Step 2/4 : RUN ..."; podman: "[1/2] STEP 2/4: RUN ..." (multi-stage) or "STEP 2/4: ...".
_STEP_RE = re.compile(r"^(Step \d+/\d+ : |(\[\d+/\d+\] )?STEP \d+/\d+: )")
DOCTOR_REPORT = "paroctl doctor: {"  # how images/doctor.py prints its JSON report


@dataclass(frozen=True)
class BuildRequest:
    """What `paroctl image build` was asked for, defaults resolved."""

    kind: Kind
    base: str
    arch: tuple[str, ...]
    tag: str
    wheelhouse: Path | None  # cpu only: where the offline wheels are (or will be downloaded)
    venv_from: str | None = None  # cpu only: an image of the same pins whose venv is reused


@dataclass(frozen=True)
class ContainerfileContext:
    """Everything the Containerfile templates may use."""

    kind: str
    base: str
    arch_list: tuple[str, ...]
    vllm_dist: str
    vllm_version: str
    python_version: str
    kernels_version: str
    plugin_version: str
    venv: str
    build_packages: tuple[str, ...]
    runtime_packages: tuple[str, ...]
    torch_version: str  # "" where the base image's torch is taken as is
    triton_min: str  # "" where the kind serves without Triton
    triton_series: str  # "" unless the kind's Triton must be this major.minor (rocm)
    venv_from: str  # "" unless the cpu venv is copied out of an existing image


class BuildFailed(RuntimeFailure):
    """An image build stopped at a step; the message holds the step and its output."""


def request(
    kind: Kind,
    *,
    arch: Sequence[str] = (),
    base: str | None = None,
    tag: str | None = None,
    wheelhouse: Path | None = None,
    venv_from: str | None = None,
) -> BuildRequest:
    """Resolve a build request against the kind's defaults."""
    defaults = DEFAULTS[kind]
    if kind != "cpu" and wheelhouse is not None:
        raise RenderError(f"--wheelhouse is for the cpu image; {kind} installs from its base")
    if kind != "cpu" and venv_from is not None:
        raise RenderError(f"--venv-from is for the cpu image; {kind} installs from its base")
    if venv_from is not None and wheelhouse is not None:
        raise RenderError("--venv-from reuses an image's venv: no --wheelhouse with it")
    if kind == "cpu" and wheelhouse is None and venv_from is None:
        wheelhouse = default_wheelhouse(defaults)
    return BuildRequest(
        kind=kind,
        base=checked_ref(base) if base else defaults.base,
        arch=tuple(arch) or defaults.arch,
        tag=tag or defaults.tag,
        wheelhouse=wheelhouse,
        venv_from=venv_from,
    )


# --- rendering -----------------------------------------------------------------------------------


def source_version(folder: str, root: Path | None = None) -> str:
    """The version in kernels/ or plugin/ pyproject.toml."""
    path = (root or source_root()) / folder / "pyproject.toml"
    try:
        return str(tomllib.loads(path.read_text())["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError) as exc:
        raise RenderError(f"{path}: no [project] version ({exc})") from exc


def context_for(req: BuildRequest, root: Path | None = None) -> ContainerfileContext:
    """The typed template context of a request."""
    defaults = DEFAULTS[req.kind]
    cpu = req.kind == "cpu"
    return ContainerfileContext(
        kind=req.kind,
        base=req.base,
        arch_list=req.arch,
        vllm_dist=defaults.vllm_dist,
        vllm_version=defaults.vllm_version,
        python_version=defaults.python_version,
        kernels_version=source_version("kernels", root),
        plugin_version=source_version("plugin", root),
        venv=VENV,
        build_packages=CPU_BUILD_PACKAGES if cpu else (),
        runtime_packages=CPU_RUNTIME_PACKAGES if cpu else (),
        torch_version=VERSIONS[req.kind].torch or "",
        triton_min=VERSIONS[req.kind].triton_min or "",
        triton_series=VERSIONS[req.kind].triton_series or "",
        venv_from=req.venv_from or "",
    )


def render_containerfile(ctx: ContainerfileContext) -> str:
    """Render images/<kind>/Containerfile.j2 (strict: a missing variable is an error)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(images_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    name = f"{ctx.kind}/Containerfile.j2"
    try:
        return env.get_template(name).render(**asdict(ctx))
    except jinja2.TemplateError as exc:
        raise RenderError(f"{Path('images') / name}: {exc}") from exc


# --- provenance ----------------------------------------------------------------------------------


def git_provenance(root: Path | None = None) -> tuple[str, bool]:
    """The checkout's HEAD sha and whether its tracked or untracked files differ from it."""
    root = root or source_root()
    head = proc.run(["git", "-C", root, "rev-parse", "HEAD"], timeout=30, check=False)
    if head.returncode != 0:
        return "unknown", True
    status = proc.run(["git", "-C", root, "status", "--porcelain"], timeout=60)
    return head.stdout.strip(), bool(status.stdout.strip())


def labels_for(
    req: BuildRequest,
    ctx: ContainerfileContext,
    base_id: str,
    git: tuple[str, bool],
    registry_digest: str,
) -> dict[str, str]:
    """The provenance labels of an image (pure)."""
    sha, dirty = git
    pins = VERSIONS[req.kind]
    optional = {
        LABEL_TORCH: pins.torch,
        LABEL_TRITON: pins.triton_min,
        LABEL_TRITON_SERIES: pins.triton_series,
        f"{LABEL}.venv-from": req.venv_from,
    }
    return {
        LABEL_KIND: req.kind,
        LABEL_SHA: sha,
        LABEL_DIRTY: "true" if dirty else "false",
        LABEL_REGISTRY: registry_digest,
        LABEL_PLUGIN: ctx.plugin_version,
        LABEL_KERNELS: ctx.kernels_version,
        LABEL_VLLM: f"{ctx.vllm_dist}=={ctx.vllm_version}",
        f"{LABEL}.arch": ",".join(req.arch),
        LABEL_BASE: req.base,
        f"{LABEL}.base-id": base_id,
        f"{LABEL}.built-by": f"paroctl {__version__}",
        **{key: value for key, value in optional.items() if value},
    }


# --- the build context ---------------------------------------------------------------------------


def assemble_context(
    req: BuildRequest,
    containerfile: str,
    directory: Path,
    labels: Mapping[str, str],
    progress: Progress | None = None,
) -> Path:
    """Write Containerfile, the checks, provenance.json, wheels/, for cpu wheelhouse/, for the
    GPU kinds kernel-plan.json."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "Containerfile").write_text(containerfile)
    for script in CONTEXT_SCRIPTS:
        shutil.copy2(images_dir() / script, directory / script)
    (directory / PROVENANCE_FILE).write_text(provenance_json(labels))
    if req.kind != "cpu":  # the kernels the image compiles ahead of time (paroctl/kernel_plans.py)
        plan = kernel_plans.image_plan(req.kind, req.arch, profiles.load_all())
        (directory / kernel_plans.PLAN_FILE).write_text(json.dumps(plan, indent=1) + "\n")
    build_wheels(directory / "wheels", progress)
    house = directory / "wheelhouse"
    house.mkdir(exist_ok=True)
    if req.wheelhouse is not None:
        for wheel in image_wheels(ensure_wheelhouse(req.wheelhouse, progress)):
            _link(wheel, house / wheel.name)
    return directory


def _link(src: Path, dst: Path) -> None:
    # A hard link costs nothing; across file systems fall back to a copy.
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


# --- building through the engine API ------------------------------------------------------------


def base_image_id(api: engine.Api, ref: str, progress: Progress | None = None) -> str:
    """The id of the base image, made (cpu default base) or pulled first when missing."""
    found = api.inspect_image(ref)
    if found is None:
        if ref == base.BASE_IMAGE:
            report(progress, f"making {ref} with debootstrap (no registry pull)")
            base.ensure_base_image(ref)
        else:
            report(progress, f"pulling {ref}")
            api.pull(ref)
        found = api.inspect_image(ref)
    if found is None:
        raise RuntimeFailure(f"base image {ref} is still not in the engine at {api.base_url}")
    return str(found["Id"])


@dataclass
class BuildStream:
    """Follows the build's JSON stream: the current step, its output, the image id, the error."""

    step: str = "(before the first step)"
    output: list[str] = field(default_factory=list)
    image_id: str = ""
    error: str = ""
    doctor_report: str = ""  # the JSON line of images/doctor.py, the last build step

    def feed(self, chunk: Mapping[str, Any]) -> list[str]:
        """Take one decoded chunk; return its complete output lines."""
        if "error" in chunk:
            self.error = str(chunk.get("error") or chunk.get("errorDetail"))
            return [self.error]
        aux = chunk.get("aux")
        if isinstance(aux, dict) and "ID" in aux:
            self.image_id = str(aux["ID"])
        lines = [line for line in str(chunk.get("stream", "")).splitlines() if line.strip()]
        for line in lines:
            if _STEP_RE.match(line):
                self.step, self.output = line, []
            else:
                self.output.append(line)
            if line.startswith(DOCTOR_REPORT):
                self.doctor_report = line[len(DOCTOR_REPORT) - 1 :]
            if line.startswith("Successfully built ") and not self.image_id:
                self.image_id = line.split()[-1]
        return lines

    def failure(self, tag: str, tail: int = 40) -> str:
        """The message of a failed build: the step, the last lines of its output, the error."""
        shown = self.output[-tail:]
        return (
            f"image build of {tag} failed at {self.step}\n--- its output (last {len(shown)} "
            "lines) ---\n" + "\n".join(shown) + f"\n--- error ---\n{self.error}"
        )


def run_build(
    api: engine.Api,
    context: Path,
    tag: str,
    labels: Mapping[str, str],
    progress: Progress | None = None,
) -> BuildStream:
    """Build through the engine's streaming API; return the finished stream or raise BuildFailed."""
    stream = BuildStream()
    for chunk in api.build(context, tag, labels):
        for line in stream.feed(chunk):
            report(progress, line)
    if stream.error or not stream.image_id:
        stream.error = stream.error or "the engine reported no image id"
        raise BuildFailed(stream.failure(tag))
    return stream


@dataclass(frozen=True)
class BuildPlan:
    """A rendered, not yet built, image: --dry-run prints it, build() carries it out."""

    request: BuildRequest
    context: ContainerfileContext
    containerfile: str
    labels: dict[str, str]

    def describe(self) -> list[str]:
        """The exact steps, for --dry-run."""
        lines = [f"# wheels: {proc.describe(wheel_command(Path('CONTEXT/wheels')))}"]
        house = self.request.wheelhouse
        if self.request.venv_from is not None:
            lines.append(f"# venv: copied from {self.request.venv_from} (its pins checked first)")
        if house is not None:
            state_ = "ready" if wheelhouse_ready(house) else "to download"
            lines.append(f"# wheelhouse ({state_}): {house}")
            if not wheelhouse_ready(house):
                lines.append(f"#   {proc.describe(wheelhouse_command(house))}")
            lines.append(f"#   minus {', '.join(VLLM_CPU_REMOVE)}")
        if self.request.kind != "cpu":
            kp = kernel_plans.image_plan(self.request.kind, self.request.arch, profiles.load_all())
            names = ", ".join(p["name"] for p in kp["plans"]) or "none"
            lines.append(f"# kernel plan (CONTEXT/kernel-plan.json) for {kp['targets']}: {names}")
        lines.append(
            f"# engine API (DOCKER_HOST): build(path=CONTEXT, dockerfile='Containerfile', "
            f"tag={self.request.tag!r}, labels=...); last step: doctor.py"
        )
        lines += [f"# label {key}={value}" for key, value in sorted(self.labels.items())]
        return [*lines, "# --- Containerfile ---", *self.containerfile.splitlines()]


def plan(req: BuildRequest, base_id: str = "(resolved at build time)") -> BuildPlan:
    """Render the Containerfile and the labels of a request (no engine needed)."""
    ctx = context_for(req)
    labels = labels_for(req, ctx, base_id, git_provenance(), knobs.load_registry().digest)
    return BuildPlan(req, ctx, render_containerfile(ctx), labels)


def build(
    req: BuildRequest, progress: Progress | None = None, api: engine.Api | None = None
) -> ImageInfo:
    """Build an image end to end and return what the engine now holds under its tag."""
    api = api or engine.Api()
    base_id = base_image_id(api, req.base, progress)
    the_plan = plan(req, base_id)
    if req.venv_from is not None:
        check_venv_source(api, req.venv_from, the_plan.labels)
    with tempfile.TemporaryDirectory(prefix="paroctl-image-") as scratch:
        context = assemble_context(
            req, the_plan.containerfile, Path(scratch), the_plan.labels, progress
        )
        stream = run_build(api, context, req.tag, the_plan.labels, progress)
    info = inspect_image(req.tag, api)
    if stream.doctor_report:
        # The last build step checked what the labels claim: the switch need not run it again.
        doctor.record(info.id, stream.doctor_report)
    else:
        # Every step came from the engine's layer cache, the doctor's too, so it printed
        # nothing (seen in CI, 2026-12-02: a 22 s docker and a 3.4 s podman build): run it once
        # now, so that a build always leaves the doctor's answer for its image id.
        if progress:
            progress("doctor step cached by the engine: running the doctor once")
        doctor.doctor_once(req.tag, api).raise_for_mismatch(req.tag)
    return info


def venv_source_problems(
    ref: str, labels: Mapping[str, str], wanted: Mapping[str, str]
) -> list[str]:
    """Why ref's venv must not go into an image with the wanted labels (pure; [] when it may)."""
    keys = (LABEL_KIND, LABEL_VLLM, LABEL_TORCH, LABEL_BASE)
    return [
        f"--venv-from {ref} has {key}={labels.get(key)}, this build pins {wanted.get(key)}"
        for key in keys
        if labels.get(key) != wanted.get(key)
    ]


def check_venv_source(api: engine.Api, ref: str, wanted: Mapping[str, str]) -> None:
    """Refuse a --venv-from image that is missing or was built with other pins."""
    raw = api.inspect_image(ref)
    if raw is None:
        raise RuntimeFailure(f"--venv-from {ref} is not in the engine at {api.base_url}")
    problems = venv_source_problems(ref, image_info(raw).labels, wanted)
    if problems:
        raise RuntimeFailure("; ".join(problems))


# --- list / inspect ------------------------------------------------------------------------------


def list_images(api: engine.Api | None = None) -> list[ImageInfo]:
    """paroctl-built images (those with a paroctl.kind label), newest first."""
    found = [image_info(raw) for raw in (api or engine.Api(timeout_s=60)).images(LABEL_KIND)]
    return sorted(found, key=lambda info: info.created, reverse=True)


def inspect_image(ref: str, api: engine.Api | None = None) -> ImageInfo:
    """One image's id, size and paroctl labels."""
    raw = (api or engine.Api(timeout_s=60)).inspect_image(ref)
    if raw is None:
        raise RuntimeFailure(f"no image {ref} in the engine (paroctl image list)")
    return image_info(raw)
