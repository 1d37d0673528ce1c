"""`paroctl k8s render`: a profile as Kubernetes manifests, for `kubectl apply -f -`."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

VERSION_RE = re.compile(r"^1\.[0-9]{1,2}$")


@click.group(name="k8s")
def k8s() -> None:
    """Render profiles for a cluster: single node (Deployment) or multi-node (LeaderWorkerSet)."""


@k8s.command(name="render")
@click.argument("name")
@click.option(
    "--topology", type=click.Choice(["single", "multinode"]), default="single", show_default=True
)
@click.option("--nodes", type=int, default=None, help="Nodes of a multinode group (default 2).")
@click.option("--k8s-version", default="1.33", show_default=True, help="Schemas to check against.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write NAME-k8s-TOPOLOGY.yaml into this directory instead of printing it.",
)
@click.option("--no-pin", is_flag=True, help="Name the profile's image ref; ask no engine.")
@click.option(
    "--no-schema-check",
    is_flag=True,
    help="Render without the strict Kubernetes schema check (said on stderr).",
)
def k8s_render(
    name: str,
    topology: str,
    nodes: int | None,
    k8s_version: str,
    out: Path | None,
    no_pin: bool,
    no_schema_check: bool,
) -> None:
    """Print a profile's manifests (pipe them to `kubectl apply -f -`), or write them to --out."""
    from paroctl import state
    from paroctl.errors import RenderError
    from paroctl.profile import profiles
    from paroctl.serve import k8s as k8s_mod
    from paroctl.serve.k8s import image

    if not VERSION_RE.match(k8s_version):
        raise RenderError(f"--k8s-version {k8s_version!r}: expected MAJOR.MINOR such as 1.33")
    prof = profiles.load(name)
    count = nodes if nodes is not None else (1 if topology == "single" else 2)
    facts = None if no_pin or prof.body.image is None else image.inspect(prof)
    manifest, choice = k8s_mod.render(prof, topology, count, facts)  # type: ignore[arg-type]
    ref = prof.body.image.ref if prof.body.image else ""
    click.echo(f"# --no-pin: the manifest names {ref}" if no_pin else f"# {choice.why}", err=True)
    if no_schema_check:
        click.echo("# not schema-checked (--no-schema-check)", err=True)
        found = []
    else:
        found = _schema_problems(manifest.documents, k8s_version)
    if found:
        raise RenderError(
            f"the render fails the Kubernetes {k8s_version} schemas: " + "; ".join(found)
        )
    if out is None:
        click.echo(manifest.text(), nl=False)
        return
    path = out / f"{prof.name}-{manifest.filename}"
    state.atomic_write(path, manifest.text())
    click.echo(str(path))


def _schema_problems(documents: Iterable[dict[str, Any]], k8s_version: str) -> list[str]:
    """The strict schema check; one that cannot run stops the render (exit 2), never passes."""
    from paroctl.serve.k8s import validate

    try:
        return validate.problems(documents, k8s_version)
    except (validate.MissingValidator, ImportError) as exc:
        # The import that failed (validate's own message names an install line for the extra).
        cause = (
            str(exc.__cause__ or exc) if isinstance(exc, validate.MissingValidator) else str(exc)
        )
        raise validate.MissingValidator(
            f"the Kubernetes schema check cannot run: {cause}. kubernetes-validate and jsonschema "
            "are paroctl dependencies: reinstall paroctl (`pip install -e .` in the checkout) or "
            "`pip install kubernetes-validate==1.37.0 jsonschema`; --no-schema-check renders "
            "without the check"
        ) from exc
