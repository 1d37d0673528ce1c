"""`paroctl image build|list|inspect|doctor`: container images with the compiled plugin."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, cast

import click

if TYPE_CHECKING:
    from paroctl.image.images import BuildRequest
    from paroctl.image.labels import ImageInfo

_KINDS = ("rocm", "cuda", "cpu")


@click.group(name="image")
def image() -> None:
    """Build and inspect the serve images (vLLM + paro-kernels + paro-vllm)."""


@image.command(name="build")
@click.argument("kind", type=click.Choice(_KINDS))
@click.option("--arch", "arch", multiple=True, help="Target GPU arch (repeatable) [kind default].")
@click.option("--base", default=None, help="Base image [kind default].")
@click.option("--tag", default=None, help="Image reference to build [kind default].")
@click.option(
    "--wheelhouse",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="cpu: offline wheels to install (downloaded into it when empty).",
)
@click.option(
    "--venv-from",
    default=None,
    metavar="IMAGE",
    help="cpu: reuse the vLLM venv of IMAGE (same pins; checked) instead of installing it.",
)
@click.option(
    "--dry-run", is_flag=True, help="Print the Containerfile, labels and steps; build nothing."
)
def image_build(
    kind: str,
    arch: tuple[str, ...],
    base: str | None,
    tag: str | None,
    wheelhouse: Path | None,
    venv_from: str | None,
    dry_run: bool,
) -> None:
    """Build an image of KIND (rocm, cuda, cpu) through the engine API, with provenance labels."""
    from paroctl.image import images

    req = images.request(
        cast("images.Kind", kind),
        arch=arch,
        base=base,
        tag=tag,
        wheelhouse=wheelhouse,
        venv_from=venv_from,
    )
    if dry_run:
        for line in images.plan(req).describe():
            click.echo(line)
        return
    _need_docker_sdk()
    info = _build_with_display(req)
    click.echo(f"built {req.tag}  {info.id[:19]}  {info.size_bytes / 1e9:.2f} GB")


def _need_docker_sdk() -> None:
    """Every engine call goes through the Docker SDK: say how to get it before anything starts."""
    from paroctl.errors import RuntimeFailure

    try:
        import docker  # noqa: F401
    except ImportError as exc:
        raise RuntimeFailure(
            "paroctl image talks to the container engine through the Docker SDK (the `docker` "
            "module), which is not importable here; it is a paroctl dependency: reinstall "
            "paroctl (`pip install -e .` in the checkout) or `pip install docker`"
        ) from exc


def _build_with_display(req: BuildRequest) -> ImageInfo:
    from rich.console import Console

    from paroctl.image import images

    console = Console(stderr=True, log_path=False, highlight=False)
    with console.status(f"building {req.tag}") as status:

        def progress(line: str) -> None:
            # Steps and paroctl's own messages scroll by; the status shows the latest output line.
            if line.startswith("Step ") or not line.startswith(" "):
                console.print(line, markup=False, soft_wrap=True)
            status.update(line[:100])

        return images.build(req, progress)


@image.command(name="list")
def image_list() -> None:
    """List paroctl-built images: reference, kind, arch, source sha, knob registry, size."""
    from paroctl.image import images
    from paroctl.image.labels import LABEL_REGISTRY

    _need_docker_sdk()
    for info in images.list_images():
        labels = info.labels
        sha = labels.get("paroctl.source-sha", "?")[:12]
        dirty = "+dirty" if labels.get("paroctl.source-dirty") == "true" else ""
        click.echo(
            f"{(info.refs or ('<none>',))[0]:<36} {labels.get('paroctl.kind', '?'):<5} "
            f"{labels.get('paroctl.arch', '?'):<10} {sha}{dirty:<6} "
            f"registry {labels.get(LABEL_REGISTRY, '?')[:12]}  "
            f"{info.size_bytes / 1e9:.2f} GB"
        )


@image.command(name="inspect")
@click.argument("ref")
def image_inspect(ref: str) -> None:
    """Print one image's id, size and paroctl labels as JSON."""
    from paroctl.image import images

    _need_docker_sdk()
    click.echo(json.dumps(images.inspect_image(ref).as_dict(), indent=2, sort_keys=True))


@image.command(name="doctor")
@click.argument("ref")
@click.option("--fresh", is_flag=True, help="Run it even when this image id passed before.")
def image_doctor(ref: str, fresh: bool) -> None:
    """Check inside REF that vLLM finds the plugin, its methods and kernels, as labelled.

    Exit 0 when it does, 1 naming the first mismatch, 2 when the doctor could not run.
    """
    from paroctl.image import doctor

    _need_docker_sdk()
    result = doctor.run_doctor(ref) if fresh else doctor.doctor_once(ref)
    report = result.report
    click.echo(
        f"torch {report.get('torch')}  vllm {report.get('vllm')}  triton {report.get('triton')}  "
        f"paro-vllm {report.get('paro-vllm')}  paro-kernels {report.get('paro-kernels')}"
    )
    click.echo(f"methods: {' '.join(report.get('methods', [])) or '(none)'}")
    for problem in report.get("problems", []):
        click.echo(f"mismatch: {problem}")
    cached = " (cached)" if result.cached else ""
    if result.ok:
        click.echo(f"ok: {ref} {result.image_id[:19]}{cached}")
    result.raise_for_mismatch(ref)
