"""Quadlet files: structure and keys. The podman here (4.3.1) predates Quadlet (4.4), so the real
generator cannot run on these machines; this checks the keys against Quadlet's documented set."""

from __future__ import annotations

import pytest

from paroctl import profiles, render

# podman-systemd.unit(5), podman 4.4-4.6: the [Container] keys this renderer may emit.
CONTAINER_KEYS = {
    "ContainerName",
    "Image",
    "Label",
    "EnvironmentFile",
    "AddDevice",
    "NoNewPrivileges",
    "PublishPort",
    "Volume",
    "PodmanArgs",
    "Exec",
}


def _sections(text: str) -> dict[str, list[tuple[str, str]]]:
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            current = line.strip("[]")
            sections[current] = []
            continue
        key, sep, value = line.partition("=")
        assert sep and current, f"not a key=value line: {line!r}"
        sections[current].append((key, value))
    return sections


@pytest.mark.parametrize("name", [n for n in profiles.list_names() if profiles.load(n).uses_engine])
def test_quadlet_structure(name: str) -> None:
    prof = profiles.load(name)
    text = render.render(prof, "quadlet").content
    sections = _sections(text)
    assert list(sections) == ["Unit", "Container", "Service", "Install"]
    keys = {k for k, _ in sections["Container"]}
    assert keys <= CONTAINER_KEYS, keys - CONTAINER_KEYS
    container = dict(sections["Container"])
    assert container["ContainerName"] == prof.unit_name
    assert container["Image"] == prof.body.image.ref  # type: ignore[union-attr]
    assert container["Exec"].startswith(" ".join(prof.body.serve.entrypoint))
    # The Quadlet and the .service run the same serve command.
    service = dict(_sections(render.render(prof, "service").content)["Service"])
    assert service["ExecStart"].endswith(container["Exec"])
