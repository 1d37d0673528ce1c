"""The plugin's knob registry: load it, validate a profile's knobs and env, derive cache keys."""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from paroctl import env, state
from paroctl.errors import RegistryError
from paroctl.profile import secrets
from paroctl.profile.checks import short

KnobValue = str | int | float | bool

# Environment the container and vLLM read, outside the plugin's own knobs. VLLM_* names are also
# checked against vllm.envs where vLLM is installed.
ENV_PREFIXES = (
    "VLLM_",
    "NCCL_",
    "RCCL_",
    "HF_",
    "HSA_",
    "HIP_",
    "ROCM_",
    "MIOPEN_",
    "TORCH",
    "PYTORCH_",
    "TRITON_",
    "OMP_",
    "MKL_",
    "CUDA_",
    "AMD_",
    "GPU_",
    "TOKENIZERS_",
    "TRANSFORMERS_",
)
# Derived by paroctl from box.gpus, never written by hand: ROCR_VISIBLE_DEVICES picks the cards and
# HIP_VISIBLE_DEVICES indexes INTO that filtered list, so a hand-written pair of the same ids breaks
# any selection that does not start at card 0 (the seed launcher's single-card failure).
DERIVED_ENV = frozenset(
    {
        "ROCR_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
        "VLLM_CACHE_ROOT",
        "TRITON_CACHE_DIR",
    }
)
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
MAX_ENV_VALUE = 4096


class Knob(BaseModel):
    """One registered knob."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["bool", "int", "enum", "str"]
    default: str = Field(min_length=1)
    values: tuple[str, ...] = ()
    min: int | None = None
    max: int | None = None
    graph: bool
    doc: str = Field(min_length=1)
    seed: str = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> Knob:
        if self.type == "enum" and not self.values:
            raise ValueError("an enum knob needs `values`")
        if self.type != "enum" and self.values:
            raise ValueError("`values` is for enum knobs only")
        problem = self.check(self.default)
        if problem:
            raise ValueError(f"default {self.default!r}: {problem}")
        return self

    def check(self, value: str) -> str | None:
        """Return why a (string) value is not allowed, or None when it is."""
        if value == "":
            return "empty value (VAR= is set-but-empty, not unset); remove the key for the default"
        if "\n" in value or "\r" in value:
            return "value contains a line break"
        if len(value) > MAX_ENV_VALUE:
            return f"{len(value)} characters (at most {MAX_ENV_VALUE})"
        if self.type == "bool" and value not in ("0", "1"):
            return f"expected '0' or '1', got {short(value)}"
        if self.type == "enum" and value not in self.values:
            return f"expected one of {', '.join(self.values)}; got {short(value)}"
        if self.type == "int":
            # [0-9], not \d: \d matches fullwidth and other scripts' digits too (int() takes them).
            if not re.fullmatch(r"-?[0-9]{1,18}", value):
                return f"expected an integer, got {short(value)}"
            number = int(value)
            if (self.min is not None and number < self.min) or (
                self.max is not None and number > self.max
            ):
                return f"expected an integer in [{self.min}, {self.max}], got {number}"
        return None

    def coerce(self, raw: KnobValue) -> str | None:
        """Turn a YAML scalar into the knob's string form, or None when the type is wrong."""
        if isinstance(raw, bool):
            return ("1" if raw else "0") if self.type == "bool" else None
        if isinstance(raw, int):
            return str(raw) if self.type in ("int", "enum", "str") else None
        return raw if isinstance(raw, str) else None


class Registry(BaseModel):
    """The whole registry file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1]
    knobs: dict[str, Knob]
    path: Path = Path()
    digest: str = ""

    def graph_knobs(self) -> tuple[str, ...]:
        """Names of the knobs that change the compiled graph."""
        return tuple(sorted(name for name, knob in self.knobs.items() if knob.graph))


@functools.cache
def load_registry(path: Path | None = None) -> Registry:
    """Load and validate the registry (default: the plugin's knobs.yaml)."""
    path = path or state.resource_path("knobs.yaml")
    try:
        raw_text = path.read_bytes()
        data = yaml.safe_load(raw_text)
    except (OSError, yaml.YAMLError) as exc:
        raise RegistryError(f"{path}: cannot read the knob registry: {exc}") from exc
    if not isinstance(data, dict):
        raise RegistryError(f"{path}: expected a mapping with `version` and `knobs`")
    try:
        registry = Registry.model_validate(data)
    except ValidationError as exc:
        lines = [
            f"{path}: {'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        ]
        raise RegistryError("\n".join(lines)) from exc
    for name in registry.knobs:
        if not _ENV_NAME.fullmatch(name) or not name.startswith("PARO_"):
            raise RegistryError(f"{path}: knobs.{name}: knob names are PARO_[A-Z0-9_]+")
    digest = hashlib.sha256(raw_text).hexdigest()
    return registry.model_copy(update={"path": path, "digest": digest})


def resolve_knobs(
    registry: Registry, given: Mapping[str, KnobValue]
) -> tuple[dict[str, str], list[str]]:
    """Every registered knob with the profile's value or the default, plus errors keyed by knob."""
    errors: list[str] = []
    resolved = {name: knob.default for name, knob in registry.knobs.items()}
    for name, raw in given.items():
        knob = registry.knobs.get(name)
        if knob is None:
            hint = _closest(name, registry.knobs)
            errors.append(f"knobs.{name}: unknown knob (not in {registry.path.name}){hint}")
            continue
        value = knob.coerce(raw)
        if value is None:
            errors.append(f"knobs.{name}: expected a {knob.type} value, got {short(raw)}")
            continue
        problem = knob.check(value)
        if problem:
            errors.append(f"knobs.{name}: {problem}")
            continue
        resolved[name] = value
    return dict(sorted(resolved.items())), errors


def check_env(given: Mapping[str, KnobValue], vllm_names: frozenset[str] | None) -> list[str]:
    """Errors in a profile's `env` section (vLLM / runtime variables)."""
    errors: list[str] = []
    for name, value in given.items():
        where = f"env.{name}"
        if secrets.is_secret(name):
            # Nothing about the value: the error message must not carry the secret either.
            errors.append(
                f"{where}: a secret; set it in the 0600 secrets file (container.secrets_env_file) "
                "and list its name in container.secret_names"
            )
            continue
        if not isinstance(value, str):
            errors.append(f"{where}: expected a string (quote it in YAML), got {short(value)}")
        elif value == "":
            errors.append(f"{where}: empty value (VAR= is set-but-empty, not unset)")
        elif "\n" in value:
            errors.append(f"{where}: value contains a line break")
        elif len(value) > MAX_ENV_VALUE:
            # podman and docker read an env file line by line, a line at most 64 KiB.
            errors.append(f"{where}: {len(value)} characters (at most {MAX_ENV_VALUE})")
        if name in DERIVED_ENV:
            errors.append(f"{where}: derived by paroctl (from box.gpus / the cache dir); remove it")
        elif name.startswith("PARO_"):
            errors.append(f"{where}: plugin knobs belong in the `knobs` section")
        elif not _ENV_NAME.fullmatch(name) or not name.startswith(ENV_PREFIXES):
            errors.append(
                f"{where}: not a vLLM/runtime variable (allowed prefixes: "
                f"{', '.join(ENV_PREFIXES)})"
            )
        elif name.startswith("VLLM_") and vllm_names is not None and name not in vllm_names:
            hint = _closest(name, vllm_names)
            errors.append(f"{where}: vLLM does not declare this variable (vllm.envs){hint}")
    return errors


@functools.cache
def vllm_env_names(envs_py: Path | None = None) -> frozenset[str] | None:
    """Names vLLM declares in vllm/envs.py, read without importing vLLM; None when not installed."""
    if envs_py is None:
        override = env.get("PAROCTL_VLLM_ENVS")
        if override:
            envs_py = Path(override)
        else:
            spec = importlib.util.find_spec("vllm")
            if spec is None or not spec.submodule_search_locations:
                return None
            envs_py = Path(next(iter(spec.submodule_search_locations))) / "envs.py"
    try:
        tree = ast.parse(envs_py.read_text())
    except (OSError, SyntaxError, ValueError):
        # ValueError covers a non-UTF-8 file (UnicodeDecodeError) and NUL bytes: unreadable here
        # means the names are not checked, not that every profile is broken.
        return None
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
            names.update(k for k in keys if isinstance(k, str) and k.startswith("VLLM_"))
    return frozenset(names) or None


def cache_key(
    image: str, model: str, quantization: str | None, knobs: Mapping[str, str], registry: Registry
) -> str:
    """Short stable hash of what makes a compiled graph reusable: image, model, graph knobs."""
    material = {
        "image": image,
        "model": model,
        "quantization": quantization,
        "knobs": {name: knobs[name] for name in registry.graph_knobs()},
    }
    blob = json.dumps(material, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def _closest(name: str, candidates: object) -> str:
    import difflib

    match = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.8)  # type: ignore[call-overload]
    return f"; did you mean {match[0]}?" if match else ""
