"""A rendered env file read back by its real readers gives exactly the profile's values.

systemd's own env-file parser (engine none: EnvironmentFile=), podman's --env-file (engine
podman/docker, Quadlet's EnvironmentFile= included) and a Kubernetes manifest's env (YAML, `$$`
for `$`): see tests/env_readers.py for how each is run for real.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from env_readers import kubernetes_env, podman_available, podman_reads, systemd_library
from env_readers import systemd_reads as systemd_reads
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paroctl.errors import ProfileError
from paroctl.profile import profiles, secrets
from paroctl.serve import k8s, render
from paroctl.serve.plan import ServePlan

REPO = Path(__file__).resolve().parents[1]
needs_systemd = pytest.mark.skipif(systemd_library() is None, reason="no libsystemd-shared here")
needs_podman = pytest.mark.skipif(not podman_available(), reason="podman is not installed")

# Values systemd's parser changed or that ended the file early (the first swallowed every line
# after it: the 20 PARO_* knobs and both VLLM_CPU_*), and their neighbours: quotes, backslashes,
# `$`, `#`, `;`, surrounding blanks.
HOSTILE = [
    '"ab',
    "'ab",
    '"quoted"',
    "'single'",
    'a"b',
    "it's",
    "a\\b",
    "\\",
    "x\\",
    "\\n",
    " lead",
    "trail ",
    " both ",
    "$HOME",
    "${X:-y}",
    "`id`",
    "#not-a-comment",
    ";semi",
    "a #b",
    "a=b=c",
    '{"json": "v\\"q"}',
]
ENV_NAMES = [f"HF_PROBE_{i}" for i in range(len(HOSTILE))]


def _profile(directory: Path, name: str, extends: str, values: list[str]) -> profiles.Profile:
    env = dict(zip(ENV_NAMES, values, strict=True))
    doc = {"description": "env read-back", "extends": extends, "env": env}
    (directory / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    return profiles.load(name, directory)


def _rendered(tmp_path: Path, prof: profiles.Profile) -> tuple[Path, dict[str, str]]:
    plan = ServePlan.of(prof)
    path = tmp_path / f"{prof.name}.env"
    path.write_text(render.artefact(plan, "env").content)
    return path, dict(plan.env)


@needs_systemd
def test_systemd_reads_back_a_leading_quote_and_every_line_after_it(
    profile_dir: Path, tmp_path: Path
) -> None:
    (profile_dir / "cpu-demo.yaml").write_text((REPO / "profiles" / "cpu-demo.yaml").read_text())
    prof = _profile(profile_dir, "probe", "cpu-demo", ['"ab', *(["ok"] * (len(HOSTILE) - 1))])
    assert not prof.uses_engine
    path, wanted = _rendered(tmp_path, prof)
    got = systemd_reads(path)
    # Before: HF_PROBE_0 was `ab\n...` (every later line inside it) and 22 knobs were missing.
    assert got == wanted
    assert sum(k.startswith("PARO_") for k in got) >= 20


@needs_systemd
def test_systemd_reads_back_quotes_backslashes_and_blanks(
    profile_dir: Path, tmp_path: Path
) -> None:
    (profile_dir / "cpu-demo.yaml").write_text((REPO / "profiles" / "cpu-demo.yaml").read_text())
    path, wanted = _rendered(tmp_path, _profile(profile_dir, "probe", "cpu-demo", HOSTILE))
    got = systemd_reads(path)
    changed = {k: (wanted[k], got.get(k)) for k in wanted if got.get(k) != wanted[k]}
    assert changed == {}
    assert set(got) == set(wanted)


@needs_podman
def test_podman_reads_back_the_same_values(profile_dir: Path, tmp_path: Path) -> None:
    text = (REPO / "profiles" / "cpu-demo-docker.yaml").read_text().replace("docker", "podman")
    (profile_dir / "cpu-demo-podman.yaml").write_text(text)
    prof = _profile(profile_dir, "probe", "cpu-demo-podman", HOSTILE)
    assert prof.uses_engine
    path, wanted = _rendered(tmp_path, prof)
    (got,) = podman_reads([path])
    assert {k: got.get(k) for k in wanted} == wanted


def test_kubernetes_reads_back_the_same_values(profile_dir: Path, tmp_path: Path) -> None:
    for name in ("paro-int4", "bf16-ref"):  # bf16-ref: paro-int4's KLD reference
        (profile_dir / f"{name}.yaml").write_text((REPO / "profiles" / f"{name}.yaml").read_text())
    prof = _profile(profile_dir, "probe", "paro-int4", HOSTILE)
    manifest, _choice = k8s.render(prof, "single", 1)
    got = kubernetes_env(yaml.safe_load_all(manifest.text()))
    assert {k: v for k, v in got if k in ENV_NAMES} == dict(zip(ENV_NAMES, HOSTILE, strict=True))


def test_a_value_past_an_env_file_line_is_refused(profile_dir: Path) -> None:
    # 80 KB of UTF-8: past the 64 KiB line podman's and docker's --env-file readers take.
    (profile_dir / "cpu-demo.yaml").write_text((REPO / "profiles" / "cpu-demo.yaml").read_text())
    with pytest.raises(ProfileError) as info:
        _profile(profile_dir, "probe", "cpu-demo", ["é" * 40_000, *HOSTILE[1:]])
    assert info.value.problems == [
        f"{profile_dir}/probe.yaml: env.HF_PROBE_0: 40000 characters (at most 4096)"
    ]


SPECIAL = [*"\"'\\$ #;=`{}()*!?&|<>~%", "é", "\u00a0"]
EVERY_POSITION = sorted(
    {v for c in SPECIAL for v in (c, c + "x", "x" + c, "x" + c + "y", c + c, f" {c} ", f"{c}\\")}
)


def test_every_special_character_in_every_position_reads_back(
    profile_dir: Path, tmp_path: Path
) -> None:
    """One broad corpus through all three readers: systemd (cpu-demo), podman (the same profile
    in a podman container) and Kubernetes (paro-int4)."""
    names = [f"HF_P_{i}" for i in range(len(EVERY_POSITION))]
    wanted = dict(zip(names, EVERY_POSITION, strict=True))
    for name in ("cpu-demo", "cpu-demo-docker", "paro-int4", "bf16-ref"):
        (profile_dir / f"{name}.yaml").write_text((REPO / "profiles" / f"{name}.yaml").read_text())
    podman = (profile_dir / "cpu-demo-docker.yaml").read_text().replace("docker", "podman")
    (profile_dir / "cpu-demo-podman.yaml").write_text(podman)
    readers = {}
    for base in ("cpu-demo", "cpu-demo-podman", "paro-int4"):
        doc = {"description": "env read-back", "extends": base, "env": wanted}
        (profile_dir / f"all-{base}.yaml").write_text(yaml.safe_dump(doc, allow_unicode=True))
        readers[base] = profiles.load(f"all-{base}", profile_dir)
    if systemd_library() is not None:
        path, _env = _rendered(tmp_path, readers["cpu-demo"])
        got = systemd_reads(path)
        assert {k: got.get(k) for k in names} == wanted
    if podman_available():
        path, _env = _rendered(tmp_path, readers["cpu-demo-podman"])
        (got,) = podman_reads([path])
        assert {k: got.get(k) for k in names} == wanted
    manifest, _choice = k8s.render(readers["paro-int4"], "single", 1)
    pod_env = dict(kubernetes_env(yaml.safe_load_all(manifest.text())))
    assert {k: pod_env.get(k) for k in names} == wanted


# --- paroctl's own reader of a secrets file (profile/secrets.py) against systemd's -------------

ENV_FILE_TEXT = st.text(alphabet=list("AB_1=\"'\\$#; \t\n\rxé`\x01"), max_size=60)


@needs_systemd
@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=ENV_FILE_TEXT)
def test_paroctls_env_file_reader_reads_what_systemd_reads(tmp_path: Path, text: str) -> None:
    # The secrets file's API key is what the serve gets from systemd; the gates send what this
    # reader finds. Before: quotes were only stripped in pairs, escapes and continuations ignored.
    path = tmp_path / "fuzz.env"
    path.write_bytes(text.encode())
    assert secrets.parse_env_file(text) == systemd_reads(path)


@needs_systemd
@pytest.mark.parametrize(
    "text",
    [
        'VLLM_API_KEY="a\\"b"\n',
        "VLLM_API_KEY=a\\\\b\n",
        "VLLM_API_KEY=ab\\\ncd\n",
        "VLLM_API_KEY='x' # not a comment\n",
        "# a comment \\\nVLLM_API_KEY=hidden\n",
        'VLLM_API_KEY=""\n',
        "VLLM_API_KEY = spaced \n",
    ],
)
def test_secrets_file_lines_systemd_reads_its_own_way(tmp_path: Path, text: str) -> None:
    path = tmp_path / "secrets.env"
    path.write_text(text)
    assert secrets.parse_env_file(text) == systemd_reads(path)
