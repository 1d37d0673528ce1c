"""Secrets and least privilege (#13.4, #13.5): secret names refused in env, the secrets file checked
at install, loopback unless a LAN address brings an API key, capabilities dropped, labels set."""

from __future__ import annotations

import itertools
import os
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from paroctl.cli.main import cli
from paroctl.errors import ProfileError, StateError
from paroctl.profile import profiles, secrets
from paroctl.serve import render
from paroctl.switch.record import api_key_for

TOKEN = "hf_SuperSecretValue123"
BODY = """\
description: test profile
extends: _r9700
model:
  path: M
  served_names: [m]
"""


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def write(directory: Path, text: str, name: str = "t") -> None:
    (directory / f"{name}.yaml").write_text(text)


@pytest.mark.parametrize("name", ["HF_TOKEN", "VLLM_API_KEY", "HF_HUB_TOKEN", "NCCL_SECRET"])
def test_secret_names_are_refused_in_env_and_never_echoed(profile_dir: Path, name: str) -> None:
    write(profile_dir, BODY + f"env:\n  {name}: {TOKEN}\n")
    for command in (["profile", "validate", "t"], ["profile", "show", "t"]):
        code, out = run(*command)
        assert code == 2
        assert (
            f"env.{name}: a secret; set it in the 0600 secrets file (container.secrets_env_file) "
            "and list its name in container.secret_names"
        ) in out
        assert TOKEN not in out


def test_secret_patterns_spare_ordinary_names() -> None:
    assert [n for n in ("TOKENIZERS_PARALLELISM", "VLLM_MAX_TOKENS", "HF_HUB_OFFLINE",
                        "PARO_KEYS", "hf_token", "MY_API_KEY_FILE") if secrets.is_secret(n)] == [
        "hf_token", "MY_API_KEY_FILE"]  # fmt: skip


def test_show_redacts_secret_looking_values_anyway(profile_dir: Path) -> None:
    write(profile_dir, BODY)
    prof = profiles.load("t", profile_dir)
    shown = secrets.redact({**prof.env, "HF_TOKEN": TOKEN})
    assert shown["HF_TOKEN"] == "<secret: not shown>" and shown["HF_HUB_OFFLINE"] == "1"


# --- the secrets file ---------------------------------------------------------------------------


def _secrets_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "secrets.env"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_file_problems_say_exactly_what_to_fix(tmp_path: Path) -> None:
    uid = os.geteuid()
    missing = tmp_path / "nope.env"
    assert secrets.file_problems("etc/secrets.env") == [
        "etc/secrets.env: not an absolute path (systemd ignores a relative EnvironmentFile)"
    ]
    assert secrets.file_problems(str(missing), owner_uid=uid) == [
        f"{missing}: does not exist; create it: install -m 600 -o root -g root /dev/null {missing}"
    ]
    loose = _secrets_file(tmp_path, "HF_TOKEN=x\n", 0o644)
    assert secrets.file_problems(str(loose), ["HF_TOKEN", "VLLM_API_KEY"], owner_uid=uid) == [
        f"{loose}: mode 644 lets others read it; fix: chmod 600 {loose}",
        f"{loose}: does not set VLLM_API_KEY (named in container.secret_names)",
    ]
    loose.chmod(0o600)
    assert secrets.file_problems(str(loose), ["HF_TOKEN"], owner_uid=uid) == []
    assert secrets.file_problems(str(loose), owner_uid=uid + 1)[0] == (
        f"{loose}: owned by uid {uid}, not root; fix: chown root:root {loose}"
    )


def _systemd_profile(profile_dir: Path, secrets_path: Path) -> None:
    write(profile_dir, BODY + f"container:\n  secrets_env_file: {secrets_path}\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="the owner check wants root-owned files (CI is root)")
def test_unit_install_checks_the_secrets_file(
    profile_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAROCTL_UNIT_DIR", str(tmp_path / "units"))
    path = _secrets_file(tmp_path, "HF_TOKEN=x\n", 0o640)
    _systemd_profile(profile_dir, path)
    code, out = run("unit", "install", "t", "--no-reload")
    assert code == 2
    assert out == (
        "Error: the secrets file is not ready (systemd would start the serve without them):\n"
        f"  {path}: mode 640 lets others read it; fix: chmod 600 {path}\n"
        f"  {path}: does not set VLLM_API_KEY (named in container.secret_names)\n"
    )
    assert not (tmp_path / "units").exists()
    path.chmod(0o600)
    path.write_text(f"HF_TOKEN=x\nVLLM_API_KEY='{TOKEN}'\n")
    code, out = run("unit", "install", "t", "--no-reload")
    assert code == 0, out
    installed = "".join(p.read_text() for p in (tmp_path / "units").iterdir())
    assert TOKEN not in installed and f"EnvironmentFile={path}" in installed


def test_api_key_for_reads_the_key_the_serve_uses(profile_dir: Path, tmp_path: Path) -> None:
    path = _secrets_file(tmp_path, f'# keys\nHF_TOKEN=x\nVLLM_API_KEY="{TOKEN}"\n')
    _systemd_profile(profile_dir, path)
    assert api_key_for(profiles.load("t", profile_dir)) == TOKEN
    path.write_text("HF_TOKEN=x\n")
    with pytest.raises(StateError, match="does not set VLLM_API_KEY"):
        api_key_for(profiles.load("t", profile_dir))
    path.unlink()
    with pytest.raises(StateError, match="cannot read the API key of t"):
        api_key_for(profiles.load("t", profile_dir))
    assert api_key_for(profiles.load("cpu-demo", Path(__file__).parents[1] / "profiles")) is None


# --- where the serve listens ---------------------------------------------------------------------


def test_the_serve_binds_loopback_unless_the_profile_says_otherwise(profile_dir: Path) -> None:
    write(profile_dir, BODY + "serve:\n  host: null\n")  # the base's LAN address deleted
    prof = profiles.load("t", profile_dir)
    assert prof.body.serve.host == "127.0.0.1"
    assert "PublishPort=127.0.0.1:8080:8080\n" in render.render(prof, "quadlet").content
    assert " --publish 127.0.0.1:8080:8080 " in render.render(prof, "service").content


def test_a_lan_address_needs_the_api_key(profile_dir: Path) -> None:
    write(profile_dir, BODY + "container:\n  secret_names: [HF_TOKEN]\n")
    with pytest.raises(ProfileError) as info:
        profiles.load("t", profile_dir)
    assert info.value.problems == [
        f"{profile_dir / '_r9700.yaml'}: serve.host: 0.0.0.0 publishes the serve beyond this "
        "machine; add VLLM_API_KEY to container.secret_names (its value in "
        "container.secrets_env_file) or bind 127.0.0.1 (inherited by t.yaml)"
    ]


def test_a_local_serve_stays_on_loopback(profile_dir: Path) -> None:
    write(profile_dir, "description: d\nextends: _cpu\nmodel: {path: M, served_names: [m]}\n"
          "serve: {host: 0.0.0.0}\n")  # fmt: skip
    with pytest.raises(
        ProfileError, match=r"serve\.host: 0\.0\.0\.0 is not loopback; a local serve"
    ):
        profiles.load("t", profile_dir)


# --- container privileges and labels ------------------------------------------------------------


def _exec_start(prof: profiles.Profile) -> list[str]:
    line = next(
        ln
        for ln in render.render(prof, "service").content.splitlines()
        if ln.startswith("ExecStart=")
    )
    return shlex.split(line.removeprefix("ExecStart="))


def test_capabilities_dropped_and_labels_set_in_service_and_quadlet(profile_dir: Path) -> None:
    write(profile_dir, BODY + 'container:\n  cap_add: [SYS_PTRACE]\n  user: "1000:1001"\n')
    prof = profiles.load("t", profile_dir)
    argv = _exec_start(prof)
    image = argv.index("localhost/paroctl-rocm:gfx1201")
    head = argv[:image]
    assert head[head.index("--cap-drop") : head.index("--cap-drop") + 6] == [
        "--cap-drop", "ALL", "--cap-add", "SYS_PTRACE", "--user", "1000:1001"]  # fmt: skip
    assert {"paroctl.profile=t", f"paroctl.profile-hash={prof.hash}"} <= {
        head[i + 1] for i, word in enumerate(head) if word == "--label"
    }
    assert "--privileged" not in argv and ("--ipc", "private") in itertools.pairwise(head)
    cache = next(w for w in argv if w.endswith(":/cache")).removesuffix(":/cache")
    chown = f"ExecStartPre=/usr/bin/chown 1000:1001 {cache}"
    assert chown in render.render(prof, "service").content.splitlines()
    quadlet = render.render(prof, "quadlet").content.splitlines()
    assert chown in quadlet
    [podman_args] = [ln for ln in quadlet if ln.startswith("PodmanArgs=")]
    assert podman_args.endswith(" --cap-drop ALL --cap-add SYS_PTRACE --user 1000:1001")
    for line in ("Label=paroctl.profile=t", f"Label=paroctl.profile-hash={prof.hash}"):
        assert line in quadlet


def test_shipped_r9700_profiles_drop_every_capability() -> None:
    shipped = Path(__file__).parents[1] / "profiles"
    prof = profiles.load("paro-int4", shipped)
    head = _exec_start(prof)
    assert head[head.index("--cap-drop") + 1] == "ALL"
    at = head.index("VLLM_API_KEY")
    assert head[at - 1 : at + 1] == ["--env", "VLLM_API_KEY"]


def test_podman_with_host_ipc_is_refused(profile_dir: Path) -> None:
    write(profile_dir, BODY + "container:\n  ipc: host\n")
    with pytest.raises(
        ProfileError, match=r"t.yaml: container.ipc: host: podman refuses it beside"
    ):
        profiles.load("t", profile_dir)


def test_unknown_capabilities_and_user_names_are_refused(profile_dir: Path) -> None:
    write(profile_dir, BODY + "container:\n  cap_add: [SYS_ADMIN]\n  user: root\n")
    with pytest.raises(ProfileError) as info:
        profiles.load("t", profile_dir)
    text = "\n".join(info.value.problems)
    assert "container.cap_add.0: Input should be 'SYS_PTRACE'" in text
    assert "container.user: String should match pattern" in text
