"""NVFP4 -> MXFP4 at load (`nvfp4_mxfp4`): compressed-tensors NVFP4 checkpoints served as MXFP4.

Seed log 2026-09-15: each NVFP4 linear (e2m1, e4m3 scale per 16, fp32 global per projection) is
dequantized per partition and requantized to e2m1 + e8m0 per 32, the block exponent chosen by
PARO_NVFP4_EXP (`mse`: no-clip vs one binade finer by squared error; `ocp`: the spec rule).
FP8 per-channel linears are requantized too (PARO_NVFP4_FP8_LAYERS=mxfp4: leaving them on the
stock FP8 path wedged the GPU in 6 of 6 boots) and bf16 `in_proj_a/b` when
PARO_NVFP4_BF16_LAYERS=in_proj_ba, so the whole model runs one kernel; other bf16 linears stay
on vLLM's unquantized path, as the checkpoint meant. The lm_head is not a linear here and stays
bf16 (PARO_NVFP4_LMHEAD=bf16); an FP8 lm_head is refused at load rather than read as bf16. The
requant error (relRMS vs the checkpoint's own dequantized weight, the only original present at
load) is logged per layer and summarized (mean/max) once; the boot marker counts the layers by
source kind, requantized (`from=`) and left on vLLM's unquantized path (`kept=`), so a profile can
assert that no layer was left behind. Activations: PARO_ACT_FORMAT with per-token scales at every M
(the seed's fp8 stream); GEMM on the fp32 reference or, with PARO_BACKEND=triton, the MXFP4
kernels (mx_triton_backend, no rotation: the partitions share one plane).

Claimed through `override_quantization_method` only when PARO_NVFP4_MXFP4=1, so a compressed-tensors
checkpoint stays on vLLM's own path by default.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch

from . import _vllm_compat as compat
from . import activations, kernel_cache, mx_triton_backend
from .knobs import read_env
from .paroquant import TorchConfigBase, resolve_backend

METHOD = "nvfp4_mxfp4"
CT_METHOD = "compressed-tensors"
NVFP4_FORMATS = ("nvfp4-pack-quantized",)
BF16_REQUANT = {"none": (), "in_proj_ba": ("in_proj_a", "in_proj_b")}
ACT_GROUP = 32  # the MX block: the group size handed to the activation quantizer (per-token here)

log = logging.getLogger("paro_vllm")


@dataclass
class _LoadState:
    """What this process requantized, for the marker line and the error report."""

    created: int = 0
    processed: int = 0
    partitions: int = 0
    unquantized: int = 0
    kinds: dict[str, int] = field(default_factory=dict)  # requantized partitions per source kind
    kept: dict[str, int] = field(default_factory=dict)  # unquantized partitions per source kind
    lm_head: str = "bf16"
    errors: dict[str, float] = field(default_factory=dict)  # prefix -> requant relRMS
    backend: str = ""
    exp: str = ""
    emitted: bool = False


STATE = _LoadState()
MARKERS: list[str] = []


def _counts(kinds: dict[str, int]) -> str:
    return ",".join(f"{k}:{v}" for k, v in sorted(kinds.items()) if v) or "none"


def relrms_summary(errors: dict[str, float]) -> tuple[float, float, str]:
    """(mean, max, worst prefix) of the per-linear requant relRMS; zeros when none."""
    if not errors:
        return 0.0, 0.0, "-"
    worst = max(errors, key=errors.__getitem__)
    return sum(errors.values()) / len(errors), errors[worst], worst


def marker_line(state: _LoadState, kernels: str = "kernels=precompiled:0 jit:0") -> str:
    """The boot marker: `layers=Q/T`, partitions by source kind requantized (`from=`) and left
    unquantized (`kept=`), the lm_head's form and the requant relRMS mean/max."""
    from ._version import __version__
    from .provenance import marker_field

    mean, worst, _ = relrms_summary(state.errors)
    total = state.partitions + state.unquantized
    return (
        f"paro-vllm: method={METHOD} backend={state.backend} exp={state.exp} "
        f"layers={state.partitions}/{total} from={_counts(state.kinds)} "
        f"kept={_counts(state.kept)} lm_head={state.lm_head} "
        f"relrms_mean={mean:.4f} relrms_max={worst:.4f} version={__version__} {kernels} "
        f"{marker_field()}"
    )


def _maybe_emit_marker() -> None:
    # Once per process, when the last claimed layer is processed (the counts are final).
    if STATE.emitted or STATE.processed < STATE.created:
        return
    STATE.emitted = True
    mean, worst, where = relrms_summary(STATE.errors)
    log.info(
        "paro-vllm: requant relRMS vs the checkpoint weights over %d linears: mean=%.4f "
        "max=%.4f (%s)",
        len(STATE.errors),
        mean,
        worst,
        where,
    )
    line = marker_line(STATE, kernel_cache.marker_field())
    MARKERS.append(line)
    log.info(line)


def is_nvfp4_config(cfg: dict[str, Any]) -> bool:
    """Whether a quantization_config is a compressed-tensors NVFP4 checkpoint."""
    if cfg.get("quant_method") != CT_METHOD:
        return False
    if cfg.get("format") in NVFP4_FORMATS:
        return True
    for group in (cfg.get("config_groups") or {}).values():
        w = (group or {}).get("weights") or {}
        if w.get("num_bits") == 4 and w.get("type") == "float" and w.get("group_size") == 16:
            return True
    return False


def _has_input_scales(cfg: dict[str, Any]) -> bool:
    groups = (cfg.get("config_groups") or {}).values()
    return any((g or {}).get("input_activations") for g in groups)


class NvFp4MxFp4Config(TorchConfigBase):
    """Loads compressed-tensors NVFP4 (+ FP8 per-channel, bf16) linears and serves them as MXFP4."""

    def __init__(
        self,
        ignore: tuple[str, ...] = (),
        input_scales: bool = False,
        knobs: dict[str, str] | None = None,
        backend: str = "reference",
    ) -> None:
        super().__init__()
        self.ignore, self.input_scales = ignore, input_scales
        self.knobs = knobs if knobs is not None else read_env()
        self.backend = backend
        self.nvfp4: frozenset[str] | None = None  # prefixes with .weight_packed
        self.fp8: frozenset[str] = frozenset()  # prefixes with .weight_scale but no packing

    def __repr__(self) -> str:
        return f"NvFp4MxFp4Config(exp={self.knobs['PARO_NVFP4_EXP']}, ignore={self.ignore})"

    @classmethod
    def get_name(cls) -> str:
        """The method name (--quantization, or claimed from compressed-tensors by the knob)."""
        return METHOD

    @classmethod
    def override_quantization_method(
        cls, hf_quant_cfg: dict[str, Any], user_quant: str | None, hf_config: Any = None
    ) -> str | None:
        """Claim compressed-tensors NVFP4 checkpoints when PARO_NVFP4_MXFP4=1 (or asked by name)."""
        if not is_nvfp4_config(hf_quant_cfg):
            return None
        if user_quant == METHOD or read_env()["PARO_NVFP4_MXFP4"] == "1":
            return METHOD
        return None

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> NvFp4MxFp4Config:
        """Build from the compressed-tensors quantization_config."""
        if not is_nvfp4_config(config):
            raise ValueError(
                f"{METHOD}: expected a compressed-tensors NVFP4 quantization_config "
                f"(format {NVFP4_FORMATS[0]}), got quant_method={config.get('quant_method')!r} "
                f"format={config.get('format')!r}"
            )
        knobs = read_env()
        if knobs["PARO_NVFP4_FP8_LAYERS"] == "keep":
            # The stock FP8 path is vLLM's compressed-tensors method, which this config replaces.
            raise ValueError(
                f"paro-vllm: {METHOD}: PARO_NVFP4_FP8_LAYERS=keep is not supported (FP8 layers "
                "left on the stock path wedged the GPU in 6 of 6 boots); use mxfp4, or unset "
                "PARO_NVFP4_MXFP4 to serve the checkpoint on vLLM's compressed-tensors path"
            )
        ignore = tuple(str(i) for i in config.get("ignore") or ())
        backend = resolve_backend(knobs["PARO_BACKEND"])
        return cls(ignore, _has_input_scales(config), knobs, backend)

    def maybe_update_config(self, model_name: str, hf_config: Any = None, revision: Any = None):
        """Learn each linear's kind from the tensor names (NVFP4 packed vs FP8 per-channel)."""
        packed = compat.tensor_prefixes(model_name, revision, ".weight_packed")
        scaled = compat.tensor_prefixes(model_name, revision, ".weight_scale") or frozenset()
        self.nvfp4 = packed
        self.fp8 = scaled - (packed or frozenset())
        self.check_lm_head()

    def check_lm_head(self) -> None:
        """Refuse an FP8 lm_head: it is an embedding-like module this config does not load, and
        vLLM would read its e4m3 bytes as bf16 (PARO_NVFP4_LMHEAD=bf16 needs a dequant loader)."""
        fp8_heads = sorted(p for p in self.fp8 if p.rpartition(".")[2] == "lm_head")
        if fp8_heads:
            raise ValueError(
                f"paro-vllm: {METHOD}: {fp8_heads[0]} is FP8 in the checkpoint; dequantizing an "
                f"FP8 lm_head (PARO_NVFP4_LMHEAD={self.knobs['PARO_NVFP4_LMHEAD']}) is not "
                "implemented on this path: serve it on vLLM's compressed-tensors path instead"
            )

    def apply_vllm_mapper(self, hf_to_vllm_mapper: Any) -> None:
        """Rename the checkpoint prefixes the way the model renames its modules."""
        if self.nvfp4:
            self.nvfp4 = frozenset(hf_to_vllm_mapper.apply_list(sorted(self.nvfp4)))
        if self.fp8:
            self.fp8 = frozenset(hf_to_vllm_mapper.apply_list(sorted(self.fp8)))

    def route(self, prefix: str) -> tuple[str, bool]:
        """(source kind nvfp4 | fp8 | bf16, requantize?) for the linear at prefix; a merged
        linear whose parts differ in either is an error (one method serves the whole merge)."""
        base, _, leaf = prefix.rpartition(".")
        subs = self.packed_modules_mapping.get(leaf)
        names = [f"{base}.{s}" if base else s for s in subs] if subs else [prefix]
        routes = set()
        for name in names:
            kind = self._source_kind(name)
            routes.add((kind, self._requantized(kind, name)))
        if len(routes) != 1:
            raise ValueError(f"paro-vllm: {prefix} merges {names} of mixed kinds {sorted(routes)}")
        return routes.pop()

    def kind(self, prefix: str) -> str:
        """nvfp4 | fp8 | bf16 (requantized) | none (left unquantized) for the linear at prefix."""
        kind, requant = self.route(prefix)
        return kind if requant else "none"

    def _ignored(self, name: str) -> bool:
        return any(
            name == i or name.endswith(f".{i}") or i == name.rpartition(".")[2] for i in self.ignore
        )

    def _source_kind(self, name: str) -> str:
        if self.nvfp4 is None:  # tensor names unknown: every non-ignored linear is NVFP4
            return "bf16" if self._ignored(name) else "nvfp4"
        if name in self.nvfp4:
            return "nvfp4"
        return "fp8" if name in self.fp8 else "bf16"

    def _requantized(self, kind: str, name: str) -> bool:
        if kind == "fp8":
            return self.knobs["PARO_NVFP4_FP8_LAYERS"] == "mxfp4"
        if kind == "bf16":
            which = self.knobs["PARO_NVFP4_BF16_LAYERS"]
            return name.rpartition(".")[2] in BF16_REQUANT[which]
        return True

    def get_quant_method(self, layer: torch.nn.Module, prefix: str) -> Any:
        """The requant method for claimed linears, unquantized for the rest."""
        if not isinstance(layer, compat.LinearBase):
            return None  # lm_head / embeddings: bf16 (an FP8 lm_head is refused in check_lm_head)
        kind, requant = self.route(prefix)
        if requant:
            return NvFp4MxFp4LinearMethod(self, kind)
        parts = len(getattr(layer, "output_sizes", None) or [0])
        STATE.unquantized += parts
        STATE.kept[kind] = STATE.kept.get(kind, 0) + parts
        return compat.UnquantizedLinearMethod()


@compat.weight_loader_v2
class NvFp4MxFp4LinearMethod(compat.LinearMethodBase):
    """Registers the checkpoint's tensors for its kind; requantizes to MXFP4 once after loading."""

    def __init__(self, quant_config: NvFp4MxFp4Config, kind: str) -> None:
        self.quant_config, self.kind = quant_config, kind

    def create_weights(
        self,
        layer: torch.nn.Module,
        input_size_per_partition: int,
        output_partition_sizes: list[int],
        input_size: int,
        output_size: int,
        params_dtype: torch.dtype,
        **extra_weight_attrs: Any,
    ) -> None:
        """Register weight_packed/weight_scale/weight_global_scale (NVFP4), weight/weight_scale
        (FP8 per channel) or weight (bf16), exactly as compressed-tensors names them."""
        k, n = input_size_per_partition, sum(output_partition_sizes)
        if k % 32:
            raise ValueError(f"paro-vllm: {getattr(layer, 'prefix', '?')}: K {k} % 32 != 0")
        loader = extra_weight_attrs["weight_loader"]
        parts = len(output_partition_sizes)

        def weight(name: str, cols: int, dtype: torch.dtype) -> None:
            data = torch.empty(n, cols, dtype=dtype)
            p = compat.ModelWeightParameter(
                data=data, input_dim=1, output_dim=0, weight_loader=loader
            )
            layer.register_parameter(name, p)

        def per_partition(name: str) -> None:
            data = torch.empty(parts, dtype=torch.float32)
            layer.register_parameter(
                name, compat.PerTensorScaleParameter(data=data, weight_loader=loader)
            )

        if self.kind == "nvfp4":
            weight("weight_packed", k // 2, torch.uint8)
            scale = compat.GroupQuantScaleParameter(
                data=torch.empty(n, k // 16, dtype=torch.float8_e4m3fn),
                input_dim=1,
                output_dim=0,
                weight_loader=loader,
            )
            layer.register_parameter("weight_scale", scale)
            per_partition("weight_global_scale")
            if self.quant_config.input_scales:  # W4A4 checkpoints carry them; unused here
                per_partition("input_global_scale")
        elif self.kind == "fp8":
            weight("weight", k, torch.float8_e4m3fn)
            scale = compat.ChannelQuantScaleParameter(
                data=torch.empty(n, 1, dtype=torch.float32), output_dim=0, weight_loader=loader
            )
            layer.register_parameter("weight_scale", scale)
        else:
            weight("weight", k, params_dtype)
        layer.paro_partition_sizes = list(output_partition_sizes)
        STATE.created += 1
        STATE.backend = self.quant_config.backend
        STATE.exp = self.quant_config.knobs["PARO_NVFP4_EXP"]

    def source_weight(self, layer: torch.nn.Module) -> torch.Tensor:
        """The checkpoint's weight W [N, K] in fp64, dequantized per partition."""
        from paro_kernels.mx import nvfp4_dequantize

        if self.kind == "nvfp4":
            rows, n0 = [], 0
            for p, size in enumerate(layer.paro_partition_sizes):
                sl = slice(n0, n0 + size)
                g = layer.weight_global_scale.data[p : p + 1]
                rows.append(
                    nvfp4_dequantize(layer.weight_packed.data[sl], layer.weight_scale.data[sl], g)
                )
                n0 += size
            return torch.cat(rows)
        if self.kind == "fp8":
            return layer.weight.data.to(torch.float64) * layer.weight_scale.data.to(torch.float64)
        return layer.weight.data.to(torch.float64)

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        """Requantize to MXFP4 (e2m1 + e8m0/32), report the error, keep fp32 W^T for the GEMM."""
        from paro_kernels.mx import mxfp4_dequantize, mxfp4_quantize, rel_rms

        rule = self.quant_config.knobs["PARO_NVFP4_EXP"]
        src = self.source_weight(layer)
        weight, scale = mxfp4_quantize(src, rule)  # type: ignore[arg-type]
        w = mxfp4_dequantize(weight, scale)
        err = rel_rms(w, src)
        prefix = getattr(layer, "prefix", "?")
        for name in (
            "weight_packed",
            "weight_scale",
            "weight_global_scale",
            "input_global_scale",
            "weight",
        ):
            if hasattr(layer, name):
                delattr(layer, name)  # the checkpoint form is no longer needed
        layer.register_parameter("weight", torch.nn.Parameter(weight, requires_grad=False))
        layer.register_parameter("weight_scale", torch.nn.Parameter(scale, requires_grad=False))
        parts = len(layer.paro_partition_sizes)
        layer.paro_n = w.shape[0]
        layer.paro_mx = None
        if self.quant_config.backend == "triton":
            act = self.quant_config.knobs["PARO_ACT_FORMAT"]
            why = mx_triton_backend.supported(act, layer.paro_partition_sizes, 0)
            if why is not None:
                raise ValueError(f"paro-vllm: {prefix}: PARO_BACKEND=triton: {why}")
            # the model's dtype: the dequant scratch reserved at load is in it
            dtype = getattr(layer, "params_dtype", None) or torch.bfloat16
            layer.paro_mx = mx_triton_backend.prepare(weight, scale, dtype=dtype)
            kernel_cache.record(
                kernel_cache.Layer(METHOD, tuple(layer.paro_partition_sizes), weight.shape[1] * 2,
                                   4, 0, getattr(layer, "bias", None) is not None),
                layer.paro_mx, self.quant_config.knobs,
            )  # fmt: skip
        else:
            layer.paro_wt = w.float().t().contiguous()
        STATE.errors[prefix] = err
        STATE.kinds[self.kind] = STATE.kinds.get(self.kind, 0) + parts
        STATE.partitions += parts
        STATE.processed += 1
        log.info("paro-vllm: requant %s %s->mxfp4 exp=%s relRMS=%.4f", prefix, self.kind, rule, err)
        _maybe_emit_marker()

    def apply(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        """y = act_quant(x) W_mx^T (+ bias) on the layer's backend."""
        knobs = self.quant_config.knobs
        cfg = activations.token_act_config(knobs, ACT_GROUP)

        def reference(x2: torch.Tensor) -> torch.Tensor:
            y = activations.fake_quant_acts(x2, cfg).float() @ layer.paro_wt
            return (y if bias is None else y + bias.float()).to(x.dtype)

        return mx_triton_backend.apply_layer(layer, x, bias, knobs["PARO_ACT_FORMAT"], reference)
