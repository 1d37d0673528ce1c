"""The checks a boot makes against its image's labels: the image is paroctl's, of the profile's
kind and knob registry, and the plugin that serves is the one the image was built with.

The switch calls `check_profile_image` before an engine boot and `check_boot_provenance` /
`check_boot_source` on the booted serve's log.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

from paroctl import proc
from paroctl.errors import RuntimeFailure
from paroctl.image.labels import (
    LABEL_KIND,
    LABEL_PLUGIN,
    LABEL_REGISTRY,
    LABEL_SHA,
    image_info,
    labelled_source,
)
from paroctl.profile.profiles import Profile
from paroctl.serve import engine

# The plugin's boot marker (plugin/paro_vllm/paroquant.py: `paro-vllm: method=... version=...`).
_MARKER_RE = re.compile(r"paro-vllm: method=\S+ .*\bversion=(\S+)")
_SOURCE_RE = re.compile(r"\bsource=(\S+)")


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
