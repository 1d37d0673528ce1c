"""MXFP4-PARO (`paroquant_mxfp4`): Quark-style MXFP4 weights, z-lab rotations on the activations.

Format (seed log 2026-09-08): per projection `weight [N, K/2]` u8 (two e2m1 codes per byte, low
nibble = even column), `weight_scale [N, K/32]` u8 e8m0, and the z-lab rotation tensors
`pairs [krot, K]` i16, `theta [krot, K/2]` f16, `channel_scales [1, K]` f16.
Identity: y = act_quant((x * channel_scales) R^T) dequant(W)^T; activations per PARO_ACT_FORMAT,
always with per-token scales (the seed's MXFP4 producer is rotate + token-quant at every M;
PARO_ACT_SCALE and the decode band are the int4/int5 kernels' knobs). MXFP4 is symmetric, so
PARO_ZP_EPILOGUE has nothing to act on here. Backends: the fp32 reference (CPU), or with
PARO_BACKEND=triton the `paro::mx_linear` kernels (mx_triton_backend; fp8 or bf16 activations).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from . import _vllm_compat as compat
from . import activations, kernel_cache, mx_triton_backend, reference_backend
from .knobs import read_env
from .paroquant import TorchConfigBase, resolve_backend, rotation_loader, rotation_runs

METHOD = "paroquant_mxfp4"
GROUP_SIZES = (32, 64, 128)
CONFIG_KEYS = ("quant_method", "group_size", "krot", "fmt")
MX_BLOCK = 32

log = logging.getLogger("paro_vllm")


@dataclass
class _LoadState:
    """What this process created and loaded, for the one boot marker line."""

    created: int = 0
    processed: int = 0
    partitions: int = 0  # quantized output partitions (checkpoint projections)
    unquantized: int = 0  # linear partitions left unquantized
    backend: str = ""
    act: str = ""
    emitted: bool = False


STATE = _LoadState()
MARKERS: list[str] = []


def marker_line(
    backend: str, act: str, quantized: int, total: int, kernels: str = kernel_cache.NONE_FIELD
) -> str:
    """The boot marker profiles expect (`paro-vllm: method=paroquant_mxfp4 ...`), with the layers
    by kind: MXFP4 (`from=`), left bf16 on vLLM's unquantized path (`kept=`), and the lm_head,
    which this method never claims (not a linear) and so is always bf16."""
    from ._version import __version__
    from .provenance import marker_field

    kept = f"bf16:{total - quantized}" if total > quantized else "none"
    return (
        f"paro-vllm: method={METHOD} backend={backend} act={act} "
        f"layers={quantized}/{total} from=mxfp4:{quantized} kept={kept} lm_head=bf16 "
        f"version={__version__} {kernels} {marker_field()}"
    )


def _maybe_emit_marker() -> None:
    # Once per process, when the last quantized layer is processed (the counts are final).
    if STATE.emitted or STATE.processed < STATE.created:
        return
    total = STATE.partitions + STATE.unquantized
    line = marker_line(
        STATE.backend, STATE.act, STATE.partitions, total, kernel_cache.marker_field()
    )
    STATE.emitted = True
    MARKERS.append(line)
    log.info(line)


def parse_config(config: dict[str, Any]) -> tuple[int, int]:
    """(group_size, krot) from the quantization_config; ValueError lists every problem."""
    problems = []
    if config.get("quant_method") != METHOD:
        problems.append(f"quant_method: expected {METHOD!r}, got {config.get('quant_method')!r}")
    gs, krot = config.get("group_size"), config.get("krot")
    if gs not in GROUP_SIZES or isinstance(gs, bool):
        problems.append(f"group_size: expected one of {GROUP_SIZES}, got {gs!r}")
    if not isinstance(krot, int) or isinstance(krot, bool) or krot < 1:
        problems.append(f"krot: expected a positive integer, got {krot!r}")
    if config.get("fmt", "mxfp4") != "mxfp4":
        problems.append(f"fmt: expected 'mxfp4', got {config.get('fmt')!r}")
    if problems:
        raise ValueError(f"{METHOD} quantization_config: " + "; ".join(problems))
    return int(gs), int(krot)  # type: ignore[arg-type]


class ParoMxfp4Config(TorchConfigBase):
    """MXFP4 weights (e2m1 + e8m0/32) behind z-lab grouped Givens rotations."""

    def __init__(
        self,
        group_size: int,
        krot: int,
        backend: str = "reference",
        knobs: dict[str, str] | None = None,
        quantized: frozenset[str] | None = None,
    ) -> None:
        super().__init__()
        self.group_size, self.krot, self.backend = group_size, krot, backend
        self.knobs = knobs if knobs is not None else read_env()
        # Checkpoint prefixes with a `.weight_scale`; None = unknown (every linear quantized).
        self.quantized = quantized

    def __repr__(self) -> str:
        return f"ParoMxfp4Config(group_size={self.group_size}, krot={self.krot})"

    @classmethod
    def get_name(cls) -> str:
        """The method name in checkpoints and --quantization."""
        return METHOD

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ParoMxfp4Config:
        """Build from the checkpoint's quantization_config (unknown keys are logged)."""
        gs, krot = parse_config(config)
        extra = sorted(set(config) - set(CONFIG_KEYS))
        if extra:
            log.warning("paro-vllm: ignoring quantization_config keys %s", extra)
        knobs = read_env()
        return cls(gs, krot, backend=resolve_backend(knobs["PARO_BACKEND"]), knobs=knobs)

    def maybe_update_config(self, model_name: str, hf_config: Any = None, revision: Any = None):
        """Learn which linears the checkpoint quantizes (tensor names are the truth)."""
        self.quantized = compat.tensor_prefixes(model_name, revision, ".weight_scale")

    def apply_vllm_mapper(self, hf_to_vllm_mapper: Any) -> None:
        """Rename the checkpoint prefixes the way the model renames its modules."""
        if self.quantized:
            self.quantized = frozenset(hf_to_vllm_mapper.apply_list(sorted(self.quantized)))

    def is_quantized(self, prefix: str) -> bool:
        """Whether the linear at `prefix` is quantized; a half-quantized merge is an error."""
        if self.quantized is None:
            return True
        base, _, leaf = prefix.rpartition(".")
        subs = self.packed_modules_mapping.get(leaf)
        names = [f"{base}.{s}" if base else s for s in subs] if subs else [prefix]
        states = [n in self.quantized for n in names]
        if any(states) and not all(states):
            raise ValueError(
                f"paro-vllm: {prefix} merges {names} but only some are MXFP4-PARO in the "
                "checkpoint; a merged linear must be all quantized or all unquantized"
            )
        return all(states)

    def get_quant_method(self, layer: torch.nn.Module, prefix: str) -> Any:
        """MXFP4-PARO for quantized linears, unquantized for the rest, None for other modules."""
        if not isinstance(layer, compat.LinearBase):
            return None
        if self.is_quantized(prefix):
            return ParoMxfp4LinearMethod(self)
        STATE.unquantized += len(getattr(layer, "output_sizes", None) or [0])
        return compat.UnquantizedLinearMethod()


def _rotation_param(layer: torch.nn.Module, shape: tuple[int, ...], dtype: torch.dtype) -> Any:
    param = torch.nn.Parameter(torch.zeros(shape, dtype=dtype), requires_grad=False)
    compat.set_weight_attrs(param, {"weight_loader": rotation_loader(layer, 1, counts=False)})
    param.paro_loaded = set()  # type: ignore[attr-defined]
    return param


@compat.weight_loader_v2
class ParoMxfp4LinearMethod(compat.LinearMethodBase):
    """create_weights registers the MXFP4 + rotation tensors; apply = rotate, act-quant, GEMM."""

    def __init__(self, quant_config: ParoMxfp4Config) -> None:
        self.quant_config = quant_config

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
        """Register weight/weight_scale and the per-partition rotation tensors."""
        cfg = self.quant_config
        k, g, krot = input_size_per_partition, cfg.group_size, cfg.krot
        if k % g or k % MX_BLOCK:
            raise ValueError(
                f"paro-vllm: {getattr(layer, 'prefix', '?')}: K per partition {k} is not a "
                f"multiple of group_size {g} and of {MX_BLOCK} (lower the tensor-parallel size)"
            )
        n, parts = sum(output_partition_sizes), len(output_partition_sizes)
        loader = extra_weight_attrs["weight_loader"]
        weight = compat.ModelWeightParameter(
            data=torch.empty(n, k // 2, dtype=torch.uint8),
            input_dim=1,
            output_dim=0,
            weight_loader=loader,
        )
        scale = compat.GroupQuantScaleParameter(
            data=torch.empty(n, k // MX_BLOCK, dtype=torch.uint8),
            input_dim=1,
            output_dim=0,
            weight_loader=loader,
        )
        layer.register_parameter("weight", weight)
        layer.register_parameter("weight_scale", scale)
        shapes = {
            "pairs": ((parts, krot, k), torch.int16),
            "theta": ((parts, krot, k // 2), torch.float16),
            "channel_scales": ((parts, 1, k), torch.float16),
        }
        for name, (shape, dtype) in shapes.items():
            layer.register_parameter(name, _rotation_param(layer, shape, dtype))
        layer.paro_partition_sizes = list(output_partition_sizes)
        STATE.created += 1
        STATE.backend = cfg.backend
        STATE.act = cfg.knobs["PARO_ACT_FORMAT"]

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        """Check the rotations, merge identical runs, dequantize the MXFP4 weight once."""
        from paro_kernels.mx import mxfp4_dequantize
        from paro_kernels.reference import check_rotation

        cfg, prefix = self.quant_config, getattr(layer, "prefix", "?")
        sizes: list[int] = layer.paro_partition_sizes
        for name in ("pairs", "theta", "channel_scales"):
            missing = sorted(set(range(len(sizes))) - getattr(layer, name).paro_loaded)
            if missing:
                raise ValueError(f"paro-vllm: {prefix}.{name}: partitions {missing} not loaded")
        k = 2 * layer.weight.shape[1]
        for p in range(len(sizes)):
            try:
                check_rotation(layer.pairs.data[p], layer.theta.data[p], k, cfg.group_size)
            except ValueError as e:
                raise ValueError(f"paro-vllm: {prefix} partition {p}: {e}") from e
        runs = rotation_runs(layer.pairs.data, layer.theta.data, layer.channel_scales.data, sizes)
        layer.paro_n = sum(sizes)
        layer.paro_mx = None
        if cfg.backend == "triton":
            why = mx_triton_backend.supported(cfg.knobs["PARO_ACT_FORMAT"], sizes, len(runs))
            if why is not None:
                raise ValueError(f"paro-vllm: {prefix}: PARO_BACKEND=triton: {why}")
            dtype = getattr(layer, "params_dtype", None) or torch.bfloat16
            layer.paro_mx = mx_triton_backend.prepare(
                layer.weight.data, layer.weight_scale.data, runs, cfg.group_size, dtype
            )
            kernel_cache.record(
                kernel_cache.Layer(METHOD, tuple(sizes), k, 4, cfg.group_size,
                                   getattr(layer, "bias", None) is not None),
                layer.paro_mx, cfg.knobs,
            )  # fmt: skip
        else:
            # fp32 W^T: e2m1 * 2**e is exact in fp32 (only the scale range could be exceeded).
            wt = mxfp4_dequantize(layer.weight.data, layer.weight_scale.data).float().t()
            layer.paro_runs = tuple(
                reference_backend.Run(
                    n0, n1, reference_backend.rotation_blocks(p, t, cs, cfg.group_size),
                    wt[:, n0:n1].contiguous(),
                )
                for n0, n1, p, t, cs in runs
            )  # fmt: skip
        STATE.processed += 1
        STATE.partitions += len(sizes)
        _maybe_emit_marker()

    def apply(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        """y = act_quant((x * cs) R^T) W^T (+ bias) on the layer's backend."""
        knobs = self.quant_config.knobs
        cfg = activations.token_act_config(knobs, self.quant_config.group_size)
        return mx_triton_backend.apply_layer(
            layer, x, bias, knobs["PARO_ACT_FORMAT"],
            lambda x2: apply_runs(layer.paro_runs, x2, bias, cfg),
        )  # fmt: skip


def _rotate(x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """x [M, K] times the block-diagonal diag(cs_g) R_g^T, one batched [G x G] product per group."""
    m, k = x.shape
    groups, g, _ = rot.shape
    return torch.bmm(x.view(m, groups, g).transpose(0, 1), rot).transpose(0, 1).reshape(m, k)


def apply_runs(
    runs: tuple[reference_backend.Run, ...],
    x: torch.Tensor,
    bias: torch.Tensor | None,
    cfg: activations.ActConfig,
) -> torch.Tensor:
    """x [M, K] -> [M, N] in x.dtype: per run rotate (fp32), quantize activations, fp32 GEMM."""
    outs = []
    for run in runs:
        xr = _rotate(x.float(), run.rot)
        xq = activations.fake_quant_acts(xr, cfg).float()
        outs.append(xq @ run.w)
    y = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)
