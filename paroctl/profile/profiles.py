"""Load and validate profiles into frozen typed objects (profile/schema.py), with `extends:`
inheritance, and the checks across fields that no one model can make."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from paroctl import state
from paroctl.errors import ProfileError
from paroctl.profile import checks, secrets, yamlsafe
from paroctl.profile import knobs as knobs_mod
from paroctl.profile.schema import MAX_TIMEOUT_S as MAX_TIMEOUT_S
from paroctl.profile.schema import MAX_TOKENS as MAX_TOKENS
from paroctl.profile.schema import TAB_OK as TAB_OK
from paroctl.profile.schema import Profile as Profile
from paroctl.profile.schema import ProfileBody

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
MAX_NAME = 64
MAX_EXTENDS_DEPTH = 8
MAX_PARENTS = 16
PLACEHOLDERS = checks.PLACEHOLDERS


def profiles_dir() -> Path:
    """Where profile YAML files live (PAROCTL_PROFILES_DIR or the shipped profiles/)."""
    return state.resource_path("profiles")


def list_names(directory: Path | None = None) -> list[str]:
    """Names of the served profiles (files not starting with `_`)."""
    directory = directory or profiles_dir()
    return sorted(p.stem for p in directory.glob("*.yaml") if not p.name.startswith("_"))


def load(name: str, directory: Path | None = None) -> Profile:
    """Load, merge and validate one profile; raise ProfileError listing every problem."""
    directory = directory or profiles_dir()
    if len(name) > MAX_NAME or not NAME_RE.fullmatch(name):
        raise ProfileError(
            [
                f"{checks.short(name)}: profile names are lowercase letters, digits and '-' "
                f"(at most {MAX_NAME})"
            ]
        )
    path = directory / f"{name}.yaml"
    if not path.exists():
        known = ", ".join(list_names(directory)) or "none"
        raise ProfileError([f"{path}: no such profile (known: {known})"])
    merged, origins = _resolve(path, directory, ())
    return _validate(name, path, merged, origins)


def load_all(directory: Path | None = None) -> list[Profile]:
    """Validate every profile; raise one ProfileError holding the problems of all of them."""
    problems: list[str] = []
    loaded: list[Profile] = []
    for name in list_names(directory):
        try:
            loaded.append(load(name, directory))
        except ProfileError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ProfileError(problems)
    return loaded


def expand(value: str) -> str:
    """Expand the {home} and {cache} placeholders a profile may use in paths."""
    return value.replace("{home}", str(state.home())).replace("{cache}", str(state.cache_dir()))


# --- loading -------------------------------------------------------------------------------------

Origins = dict[tuple[str, ...], Path]


def _read(path: Path) -> dict[str, Any]:
    try:
        text = yamlsafe.read_text(path)
        data = yamlsafe.load(text)
    except OSError as exc:
        raise ProfileError([f"{path}: cannot read: {exc.strerror}"]) from exc
    except UnicodeDecodeError as exc:
        raise ProfileError([f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"]) from exc
    except yamlsafe.LoadError as exc:
        raise ProfileError([f"{path}: {exc.message}"]) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ProfileError([f"{path}: invalid YAML{where}: {problem}"]) from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ProfileError([f"{path}: expected a mapping of keys, got {type(data).__name__}"])
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise ProfileError([f"{path}: keys must be strings, got {checks.short(bad[0])}"])
    return data


Resolved = dict[Path, tuple[dict[str, Any], Origins]]


def _resolve(
    path: Path, directory: Path, chain: tuple[Path, ...], memo: Resolved | None = None
) -> tuple[dict[str, Any], Origins]:
    """Read a file and merge its bases, each resolved once per load (a diamond stays linear)."""
    memo = {} if memo is None else memo
    if path in chain:
        cycle = " -> ".join(p.stem for p in (*chain, path))
        raise ProfileError([f"{chain[0]}: extends: cycle {cycle}"])
    if len(chain) >= MAX_EXTENDS_DEPTH:
        raise ProfileError([f"{chain[0]}: extends: deeper than {MAX_EXTENDS_DEPTH} levels"])
    if path in memo:
        return memo[path]
    data = _read(path)
    merged: dict[str, Any] = {}
    origins: Origins = {}
    for base in _parents(path, data.pop("extends", []), directory):
        base_data, base_origins = _resolve(base, directory, (*chain, path), memo)
        merged = _merge(merged, base_data)
        origins.update(base_origins)
    _record_origins(data, path, (), origins)
    memo[path] = (_merge(merged, data), origins)
    return memo[path]


def _parents(path: Path, parents: Any, directory: Path) -> list[Path]:
    """The base files an `extends:` value names, each checked to exist."""
    if isinstance(parents, str):
        parents = [parents]
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        got = checks.short(parents)
        raise ProfileError([f"{path}: extends: expected a base name or a list of names, got {got}"])
    if len(parents) > MAX_PARENTS:
        raise ProfileError([f"{path}: extends: {len(parents)} bases (at most {MAX_PARENTS})"])
    bases = []
    for parent in parents:
        base = directory / f"{parent}.yaml"
        # The length check first: an over-long name makes exists() raise, not return False.
        if len(parent) > MAX_NAME or not NAME_RE.fullmatch(parent.lstrip("_")) or not base.exists():
            raise ProfileError(
                [
                    f"{path}: extends: no such base profile {checks.short(parent)} "
                    f"(looked for {checks.clip(str(base), 200)})"
                ]
            )
        bases.append(base)
    return bases


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge mappings; lists and scalars in `over` replace; `null` deletes a base key."""
    out = dict(base)
    for key, value in over.items():
        if value is None and key in out:
            del out[key]
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _record_origins(
    data: Mapping[str, Any], path: Path, prefix: tuple[str, ...], origins: Origins
) -> None:
    for key, value in data.items():
        here = (*prefix, str(key))
        origins[here] = path
        if isinstance(value, dict):
            _record_origins(value, path, here, origins)


# --- validation ----------------------------------------------------------------------------------


def _validate(name: str, path: Path, merged: dict[str, Any], origins: Origins) -> Profile:
    registry = knobs_mod.load_registry()
    # One pass over every string first: control characters are refused whatever the field's type,
    # so no later check (or template) ever sees a newline that could add a unit directive.
    problems = checks.text_problems(merged, TAB_OK, frozenset({("env",), ("knobs",)}))
    body: ProfileBody | None = None
    try:
        body = ProfileBody.model_validate(merged)
    except ValidationError as exc:
        problems.extend(_pydantic_problems(exc))
    raw_knobs = _string_keys(merged.get("knobs") or {})
    raw_env = _string_keys(merged.get("env") or {})
    resolved_knobs: dict[str, str] = {}
    if isinstance(raw_knobs, dict):
        resolved_knobs, knob_errors = knobs_mod.resolve_knobs(registry, raw_knobs)
        problems.extend(_split(e) for e in knob_errors)
    if isinstance(raw_env, dict):
        vllm_names = knobs_mod.vllm_env_names() or _serve_vllm_env_names(merged)
        problems.extend(_split(e) for e in knobs_mod.check_env(raw_env, vllm_names))
    if body is not None:
        problems.extend(_cross_checks(body, resolved_knobs))
        problems.extend(_reference_checks(name, path.parent, body))
        problems.extend(_privilege_checks(body))
    if problems:
        raise ProfileError(sorted({_locate(loc, msg, path, origins) for loc, msg in problems}))
    assert body is not None
    env = {k: str(v) for k, v in sorted(raw_env.items())}
    digest = _profile_hash(name, body, resolved_knobs, env)
    return Profile(
        name=name,
        path=path,
        body=body,
        knobs=resolved_knobs,
        env=env,
        hash=digest,
        registry_digest=registry.digest,
    )


def _string_keys(section: Any) -> Any:
    """A mapping without its non-string keys (text_problems reports those); other values as is."""
    if not isinstance(section, dict):
        return section
    return {k: v for k, v in section.items() if isinstance(k, str)}


def _serve_vllm_env_names(merged: dict[str, Any]) -> frozenset[str] | None:
    """VLLM_* names from the vLLM a local profile's own interpreter would run, when it exists."""
    entry = (
        (merged.get("serve") or {}).get("entrypoint")
        if isinstance(merged.get("serve"), dict)
        else None
    )
    runtime = merged.get("runtime") if isinstance(merged.get("runtime"), dict) else {}
    if not isinstance(entry, list) or not entry or not isinstance(entry[0], str):
        return None
    if not isinstance(runtime, dict) or runtime.get("engine") != "none":
        return None
    venv = Path(expand(entry[0])).parent.parent
    found = sorted(venv.glob("lib/python3*/site-packages/vllm/envs.py"))
    return knobs_mod.vllm_env_names(found[0]) if found else None


def _cross_checks(body: ProfileBody, knobs: Mapping[str, str]) -> list[tuple[tuple[str, ...], str]]:
    problems: list[tuple[tuple[str, ...], str]] = []
    box, runtime, serve = body.box, body.runtime, body.serve
    if runtime.engine != "none" and body.image is None:
        problems.append((("image",), f"required when runtime.engine is {runtime.engine}"))
    if runtime.engine == "none" and body.image is not None:
        problems.append((("image",), "set, but runtime.engine is none (nothing would run it)"))
    if body.image is not None and body.image.kind != box.accelerator:
        problems.append(
            (
                ("image", "kind"),
                f"expected {box.accelerator} (box.accelerator), got {body.image.kind}",
            )
        )
    if box.accelerator == "cpu" and box.gpus:
        problems.append((("box", "gpus"), f"expected none on a cpu box, got {list(box.gpus)}"))
    if box.accelerator == "cpu" and serve.tensor_parallel_size > 1:
        # serve/cpu.py plans one engine's cores and KV space; ranks would share and oversubscribe.
        problems.append(
            (
                ("serve", "tensor_parallel_size"),
                f"expected 1 on a cpu box (one engine binds the cores), got "
                f"{serve.tensor_parallel_size}",
            )
        )
    if box.accelerator != "cpu":
        if not box.gpus:
            problems.append((("box", "gpus"), f"a {box.accelerator} box needs at least one GPU"))
        elif serve.tensor_parallel_size > len(box.gpus):
            problems.append(
                (
                    ("serve", "tensor_parallel_size"),
                    f"expected <= {len(box.gpus)} (the GPUs in box.gpus), got "
                    f"{serve.tensor_parallel_size}",
                )
            )
        if len(set(box.gpus)) != len(box.gpus):
            problems.append((("box", "gpus"), f"GPU ids repeat: {list(box.gpus)}"))
    if serve.mode == "prod" and knobs.get("PARO_NUMERICS_CHECK", "off") != "off":
        problems.append(
            (
                ("knobs", "PARO_NUMERICS_CHECK"),
                "must be off in prod mode (an eval-boot tool: its fp64 reference OOM'd "
                "a prod worker, seed log 'Traps hit'); use serve.mode: eval",
            )
        )
    for arg in serve.extra_args:
        managed = _managed(arg)
        if managed:
            flag = checks.clip(arg.split("=", 1)[0], 40)
            problems.append(
                (("serve", "extra_args"), f"{flag} is set through serve.{managed}, not extra_args")
            )
    return problems


def _managed(arg: str) -> str | None:
    """The serve field owning a flag, in any spelling vLLM's parser accepts for it."""
    flag = arg.split("=", 1)[0]
    if flag in _SHORT_FLAGS:
        flag = _SHORT_FLAGS[flag]
    if not flag.startswith("--") or len(flag) < 4:
        return None
    # vLLM reads --max_model_len as --max-model-len, and argparse takes any unambiguous prefix.
    flag = "--" + flag[2:].replace("_", "-")
    owners = {owner for name, owner in _MANAGED_FLAGS.items() if name.startswith(flag)}
    return " / ".join(sorted(owners)) if owners else None


def _reference_checks(
    name: str, directory: Path, body: ProfileBody
) -> list[tuple[tuple[str, ...], str]]:
    """gates.kld.reference must name another profile that exists (KL against itself is 0)."""
    kld = body.gates.kld
    if kld is None:
        return []
    where = ("gates", "kld", "reference")
    if kld.reference == name:
        return [(where, "is this profile itself (its KL against itself is always 0)")]
    if not NAME_RE.fullmatch(kld.reference) or kld.reference not in list_names(directory):
        return [(where, f"no such profile {checks.short(kld.reference)} in {directory}")]
    return []


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: where it resolves is not ours to know


def _privilege_checks(body: ProfileBody) -> list[tuple[tuple[str, ...], str]]:
    """Least privilege: a LAN address needs an API key; podman needs a private IPC namespace."""
    host, container = body.serve.host, body.container
    problems: list[tuple[tuple[str, ...], str]] = []
    if body.runtime.engine == "podman" and container.ipc != "private":
        problems.append(
            (
                ("container", "ipc"),
                f"{container.ipc}: podman refuses it beside --shm-size, which the serve always "
                'gets ("cannot set shmsize when running in the host IPC Namespace"); use '
                "private (the TP workers share the container's own /dev/shm)",
            )
        )
    if is_loopback(host):
        return problems
    where = ("serve", "host")
    if body.runtime.kind == "local":
        problems.append((where, f"{host} is not loopback; a local serve binds 127.0.0.1 only"))
    elif secrets.API_KEY_NAME not in container.secret_names:
        problems.append(
            (
                where,
                f"{host} publishes the serve beyond this machine; add {secrets.API_KEY_NAME} to "
                "container.secret_names (its value in container.secrets_env_file) or bind "
                "127.0.0.1",
            )
        )
    return problems


# vLLM flags the typed `serve` section owns; duplicating them in extra_args would let two values
# race (argparse keeps the last), so they are refused there.
_MANAGED_FLAGS = {
    "--model": "model.path",
    "--served-model-name": "model.served_names",
    "--host": "host",
    "--port": "port",
    "--tensor-parallel-size": "tensor_parallel_size",
    "--max-model-len": "max_model_len",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--max-num-seqs": "max_num_seqs",
    "--enable-prefix-caching": "enable_prefix_caching",
    "--no-enable-prefix-caching": "enable_prefix_caching",
    "--enforce-eager": "mode",
    "--speculative-config": "speculative",
    "--max-logprobs": "max_logprobs",
    "--quantization": "model.quantization",
    "--override-generation-config": "generation_override",
}
# vLLM's short aliases of managed flags.
_SHORT_FLAGS = {"-tp": "--tensor-parallel-size", "-q": "--quantization"}


def _pydantic_problems(exc: ValidationError) -> Iterable[tuple[tuple[str, ...], str]]:
    for err in exc.errors(include_url=False):
        loc = tuple(str(p) for p in err["loc"])
        kind = err["type"]
        if kind == "extra_forbidden":
            msg = "unknown key"
        elif kind == "missing":
            msg = "required key is missing"
        else:
            text = err["msg"].removeprefix("Value error, ")
            msg = f"{text}; got {_short(err.get('input'))}"
        yield loc, msg


def _short(value: Any) -> str:
    return checks.short(value)


def _split(error: str) -> tuple[tuple[str, ...], str]:
    key, _, msg = error.partition(": ")
    return tuple(key.split(".", 1)), msg


def _locate(loc: tuple[str, ...], msg: str, path: Path, origins: Origins) -> str:
    """Format one problem, naming the file the offending key came from (a base or the profile)."""
    source = path
    for cut in range(len(loc), 0, -1):
        if loc[:cut] in origins:
            source = origins[loc[:cut]]
            break
    dotted = ".".join(loc) if loc else "(top level)"
    via = f" (inherited by {path.name})" if source != path else ""
    return checks.clip(f"{source}: {dotted}: {msg}{via}", 600)


def _profile_hash(
    name: str, body: ProfileBody, knobs: Mapping[str, str], env: Mapping[str, str]
) -> str:
    blob = json.dumps(
        {
            "name": name,
            # absent optional sections (None) leave the hash alone: a schema that grows one
            # does not make every profile look edited
            "body": body.model_dump(mode="json", exclude={"cluster"}, exclude_none=True),
            "knobs": knobs,
            "env": env,
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]
