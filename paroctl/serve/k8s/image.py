"""Which image reference a cluster render names: the digest of a paroctl-built image, else the
profile's ref. A tag can move under a running Deployment; a digest cannot."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from paroctl import proc
from paroctl.errors import RuntimeFailure
from paroctl.image import provenance
from paroctl.profile.profiles import Profile
from paroctl.serve import engine


@dataclass(frozen=True)
class ImageFacts:
    """What the local engine knows of a profile's image: paroctl labels, registry digests."""

    labels: dict[str, str] = field(default_factory=dict)
    repo_digests: tuple[str, ...] = ()


@dataclass(frozen=True)
class Choice:
    """The reference a render uses, and why (shown on stderr, never in the manifest)."""

    ref: str
    why: str


def inspect(profile: Profile) -> ImageFacts | None:
    """The profile's image in its own engine (podman or docker); None when either is missing."""
    assert profile.body.image is not None
    argv = [engine.engine_binary(profile), "image", "inspect", profile.body.image.ref]
    try:
        done = proc.run(argv, timeout=60, check=False)
    except RuntimeFailure:
        return None  # no engine on this machine: render from the profile alone
    if done.returncode != 0:
        return None
    try:
        raw = json.loads(done.stdout)[0]
    except (json.JSONDecodeError, IndexError, KeyError, TypeError) as exc:
        raise RuntimeFailure(f"`{proc.describe(argv)}`: unreadable output ({exc})") from exc
    return facts_from_inspect(raw)


def facts_from_inspect(raw: dict[str, object]) -> ImageFacts:
    """Read labels and registry digests out of one `image inspect` record (podman or docker)."""
    config = raw.get("Config")
    labels = (config.get("Labels") if isinstance(config, dict) else None) or raw.get("Labels")
    digests = raw.get("RepoDigests") or ()
    return ImageFacts(
        labels={str(k): str(v) for k, v in (labels or {}).items() if str(k).startswith("paroctl.")}
        if isinstance(labels, dict)
        else {},
        repo_digests=tuple(str(d) for d in digests) if isinstance(digests, list) else (),
    )


def choose(profile: Profile, facts: ImageFacts | None) -> Choice:
    """Pin by digest when the image was built by paroctl for this profile's knob registry."""
    assert profile.body.image is not None
    ref = profile.body.image.ref
    if facts is None:
        return Choice(ref, f"image {ref} is not in the local engine: the manifest names the tag")
    problems = provenance.profile_image_problems(profile, facts.labels)
    if problems:
        return Choice(ref, "; ".join(problems) + ": the manifest names the tag")
    repository = _repository(ref)
    for digest in facts.repo_digests:
        name, _, sha = digest.partition("@")
        if name == repository and sha.startswith("sha256:"):
            return Choice(f"{repository}@{sha}", f"image {ref} pinned by its digest")
    return Choice(
        ref, f"image {ref} has no registry digest yet (push it first): the manifest names the tag"
    )


def _repository(ref: str) -> str:
    """A reference without its tag or digest (a ':' after the last '/' starts the tag)."""
    ref = ref.split("@", 1)[0]
    head, _, last = ref.rpartition("/")
    name = last.split(":", 1)[0]
    return f"{head}/{name}" if head else name
