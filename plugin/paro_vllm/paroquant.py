"""ParoQuant (z-lab `paroquant` checkpoints): the QuantizationConfig and its LinearMethod.

Format (seed log, first section): per projection AWQ-packed `qweight [K, N/8]` / `qzeros [K/G, N/8]`
int32, `scales [K/G, N]` f16, `pairs [krot, K]` i16 (group-local), `theta [krot, K/2]` f16,
`channel_scales [1, K]` f16 (pre-inverted); bits=5 adds `qweight_hi [K, N/32]` /
`qzeros_hi [K/G, N/32]`. Identity: y = act_quant((x * channel_scales) R^T) dequant(Q)^T, with
act_quant per PARO_ACT_FORMAT / PARO_ACT_SCALE / PARO_DECODE_MAX_M and the zero point per
PARO_ZP_EPILOGUE on both backends (`activations.py` defines them; bf16 = W4A16). The Triton
backend serves bf16 (W4A16, int4 only), fp8 and int8 (W4A8 / W5A8) with the same rules; its
marker names the mode it serves.

A merged linear (QKV, gate_up, in_proj_qkvz) holds one rotation per vLLM partition
([P, ...] leading axis); identical adjacent rotations are merged into one run at
process_weights_after_loading, so any P is accepted at create_weights (seed "Traps hit").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn import Parameter

from . import _vllm_compat as compat
from . import activations, kernel_cache, reference_backend, triton_backend
from .knobs import read_env

METHOD = "paroquant"
BITS = (4, 5)
GROUP_SIZES = (64, 128)
CONFIG_KEYS = ("quant_method", "bits", "group_size", "krot")
QKV_SHARDS = {"q": 0, "k": 1, "v": 2}
ACT_KNOBS = ("PARO_ACT_FORMAT", "PARO_ACT_SCALE", "PARO_ZP_EPILOGUE", "PARO_DECODE_MAX_M")
# A config built without knobs (tests, direct use) is the plain W4A16 linear; from_config passes
# the environment's knobs, whose registry default is fp8.
W4A16_KNOBS: Mapping[str, str] = {
    "PARO_ACT_FORMAT": "bf16",
    "PARO_ACT_SCALE": "token",
    "PARO_ZP_EPILOGUE": "0",
    "PARO_DECODE_MAX_M": "64",
}

log = logging.getLogger("paro_vllm")


# --------------------------------------------------------------------------- per-process marker


@dataclass
class _LoadState:
    """What this process created and loaded, for the one boot marker line."""

    created: int = 0
    processed: int = 0
    projections: int = 0  # checkpoint projections loaded (one rotation tensor each)
    unquantized: int = 0  # linear partitions left unquantized
    bits: int = 0
    backend: str = ""
    act: str = ""  # the activation mode actually served, e.g. "act=int8/group zpe=1"
    emitted: bool = False
    lines: list[str] = field(default_factory=list)


STATE = _LoadState()


def marker_line(
    backend: str, bits: int, quantized: int, total: int, act: str = "",
    kernels: str = kernel_cache.NONE_FIELD,
) -> str:  # fmt: skip
    """The boot marker profiles expect (`paro-vllm: method=paroquant ...`), act mode last.

    The act fields come after `version=` so existing expect lines keep matching; then
    `kernels=precompiled:N jit:M` (kernel_cache.marker_field); `source=` (the image's source
    sha, paroctl compares it with the image label) is last.
    """
    from ._version import __version__
    from .provenance import marker_field

    line = (
        f"paro-vllm: method={METHOD} backend={backend} bits={bits} "
        f"layers={quantized}/{total} version={__version__}"
    )
    mode = f" {act}" if act else ""
    return f"{line}{mode} {kernels} {marker_field()}"


def act_label(knobs: Mapping[str, str], backend: str) -> str:
    """The served activation mode for the marker: `act=<format>[/<scale>] zpe=<0|1>`.

    The scale is PARO_ACT_SCALE, the granularity above the decode band (the band is always
    per-group). Both backends serve the knobs' mode; the Triton W4A16 GEMM (bf16) has no
    epilogue form, so it reports zpe=0 there.
    """
    fmt = knobs["PARO_ACT_FORMAT"]
    zpe = "0" if backend == "triton" and fmt == "bf16" else knobs["PARO_ZP_EPILOGUE"]
    scale = "" if fmt == "bf16" else f"/{knobs['PARO_ACT_SCALE']}"
    return f"act={fmt}{scale} zpe={zpe}"


def _maybe_emit_marker() -> None:
    # Emitted when the last quantized layer of this process has been processed: by then every
    # weight is loaded and the counts are final. Once per process.
    if STATE.emitted or STATE.processed < STATE.created:
        return
    line = marker_line(
        STATE.backend,
        STATE.bits,
        STATE.projections,
        STATE.projections + STATE.unquantized,
        STATE.act,
        kernel_cache.marker_field(),
    )
    STATE.emitted = True
    STATE.lines.append(line)
    log.info(line)


# --------------------------------------------------------------------------- backend


def _triton_importable() -> bool:
    try:
        import paro_kernels.triton  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_backend(requested: str) -> str:
    """The backend PARO_BACKEND names, resolved: auto -> triton on a GPU, reference on CPU."""
    if requested == "triton":
        if compat.is_cpu() or not _triton_importable():
            raise ValueError(
                "paro-vllm: PARO_BACKEND=triton needs a GPU and the `triton` package; "
                "use PARO_BACKEND=reference (or auto)"
            )
        return "triton"
    if requested == "auto" and not compat.is_cpu():
        if _triton_importable():
            return "triton"
        log.warning("paro-vllm: triton is not importable; PARO_BACKEND=auto -> reference")
    return "reference"


# --------------------------------------------------------------------------- config


def parse_config(config: dict[str, Any]) -> tuple[int, int, int]:
    """(bits, group_size, krot) from a z-lab quantization_config; ValueError lists every problem."""
    problems = []
    if config.get("quant_method") != METHOD:
        problems.append(f"quant_method: expected {METHOD!r}, got {config.get('quant_method')!r}")
    bits, gs, krot = config.get("bits"), config.get("group_size"), config.get("krot")
    if bits not in BITS or isinstance(bits, bool):
        problems.append(f"bits: expected 4 or 5, got {bits!r}")
    if gs not in GROUP_SIZES or isinstance(gs, bool):
        problems.append(f"group_size: expected 64 or 128, got {gs!r}")
    if not isinstance(krot, int) or isinstance(krot, bool) or krot < 1:
        problems.append(f"krot: expected a positive integer, got {krot!r}")
    if problems:
        raise ValueError("paroquant quantization_config: " + "; ".join(problems))
    return int(bits), int(gs), int(krot)  # type: ignore[arg-type]


class TorchConfigBase(compat.QuantizationConfig):
    """What every paro-vllm method answers the same: torch activations, no GPU capability floor,
    the config inside config.json. The methods subclass this instead of repeating it."""

    @classmethod
    def get_supported_act_dtypes(cls) -> list[torch.dtype]:
        """Activation dtypes the linear accepts."""
        return [torch.bfloat16, torch.float16, torch.float32]

    @classmethod
    def get_min_capability(cls) -> int:
        """No GPU capability floor: the reference backend is plain torch."""
        return 0

    @staticmethod
    def get_config_filenames() -> list[str]:
        """The config lives inside config.json (quantization_config)."""
        return []


class ParoQuantConfig(TorchConfigBase):
    """z-lab ParoQuant: int4/int5 asymmetric group weights + grouped Givens rotations."""

    def __init__(
        self,
        bits: int,
        group_size: int,
        krot: int,
        backend: str = "reference",
        quantized: frozenset[str] | None = None,
        knobs: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.bits, self.group_size, self.krot = bits, group_size, krot
        self.backend = backend
        # The activation knobs (ACT_KNOBS); read per call by apply(), as in paroquant_mxfp4.
        self.knobs = dict(W4A16_KNOBS if knobs is None else knobs)
        # Checkpoint prefixes with a `.qweight`; None = unknown (then every linear is quantized).
        self.quantized = quantized

    def __repr__(self) -> str:
        return (
            f"ParoQuantConfig(bits={self.bits}, group_size={self.group_size}, "
            f"krot={self.krot}, backend={self.backend}, {act_label(self.knobs, self.backend)})"
        )

    @classmethod
    def get_name(cls) -> str:
        """The method name in checkpoints and --quantization."""
        return METHOD

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ParoQuantConfig:
        """Build from the checkpoint's quantization_config (unknown keys are logged, not fatal)."""
        bits, gs, krot = parse_config(config)
        extra = sorted(set(config) - set(CONFIG_KEYS))
        if extra:
            log.warning("paro-vllm: ignoring quantization_config keys %s", extra)
        knobs = read_env()
        backend = resolve_backend(knobs["PARO_BACKEND"])
        act = {k: knobs[k] for k in ACT_KNOBS}
        return cls(bits, gs, krot, backend=backend, knobs=act)

    def maybe_update_config(self, model_name: str, hf_config: Any = None, revision: Any = None):
        """Learn which linears the checkpoint quantizes (tensor names are the truth)."""
        self.quantized = compat.quantized_prefixes(model_name, revision)

    def apply_vllm_mapper(self, hf_to_vllm_mapper: Any) -> None:
        """Rename the checkpoint prefixes the way the model renames its modules."""
        if self.quantized:
            self.quantized = frozenset(hf_to_vllm_mapper.apply_list(sorted(self.quantized)))

    def is_quantized(self, prefix: str) -> bool:
        """Whether the linear at vLLM `prefix` is quantized; a half-quantized merge is an error."""
        if self.quantized is None:
            return True
        base, _, leaf = prefix.rpartition(".")
        subs = self.packed_modules_mapping.get(leaf)
        names = [f"{base}.{s}" if base else s for s in subs] if subs else [prefix]
        states = [n in self.quantized for n in names]
        if any(states) and not all(states):
            have = [n for n, s in zip(names, states, strict=True) if s]
            raise ValueError(
                f"paro-vllm: {prefix} merges {names} but only {have} are quantized in the "
                "checkpoint; a merged linear must be all ParoQuant or all unquantized"
            )
        return all(states)

    def get_quant_method(self, layer: torch.nn.Module, prefix: str) -> Any:
        """ParoQuant for quantized linears, unquantized for the rest, None for other modules."""
        if not isinstance(layer, compat.LinearBase):
            return None  # embeddings and lm_head stay unquantized
        if self.is_quantized(prefix):
            return ParoQuantLinearMethod(self)
        STATE.unquantized += len(getattr(layer, "output_sizes", None) or [0])
        return compat.UnquantizedLinearMethod()


# --------------------------------------------------------------------------- loaders


def _shard_slots(shard_id: object, partitions: int) -> tuple[int, ...]:
    if shard_id is None:
        # Fused on disk (one tensor for the whole merged linear) = one projection, one rotation.
        return tuple(range(partitions))
    ids = shard_id if isinstance(shard_id, tuple | list) else (shard_id,)
    slots = tuple(QKV_SHARDS[i] if isinstance(i, str) else int(i) for i in ids)
    if any(not 0 <= s < partitions for s in slots):
        raise ValueError(f"paro-vllm: shard id {shard_id!r} outside {partitions} partition(s)")
    return slots


def rotation_loader(layer: torch.nn.Module, k_dim: int, counts: bool) -> Callable[..., None]:
    """Weight loader of a per-partition rotation tensor (pairs, theta, channel_scales).

    The parameter is [P, *checkpoint shape]; shard_id picks the partition slot(s). Along K it is
    sharded for row-parallel layers (exact: pairs are group-local); never along N.
    """

    def load(param: Parameter, loaded: torch.Tensor, shard_id: object = None) -> None:
        size = param.data.shape[1 + k_dim]
        if loaded.shape[k_dim] != size:  # row-parallel: this rank's K slice
            loaded = loaded.narrow(k_dim, getattr(layer, "tp_rank", 0) * size, size)
        slots = _shard_slots(shard_id, param.data.shape[0])
        for slot in slots:
            if tuple(param.data[slot].shape) != tuple(loaded.shape):
                raise ValueError(
                    f"paro-vllm: {getattr(layer, 'prefix', '?')}: expected a tensor of shape "
                    f"{list(param.data[slot].shape)}, got {list(loaded.shape)}"
                )
            param.data[slot].copy_(loaded)
            param.paro_loaded.add(slot)  # type: ignore[attr-defined]
        if counts:
            STATE.projections += 1

    return load


def _rotation_param(
    layer: torch.nn.Module, shape: tuple[int, ...], dtype: torch.dtype, k_dim: int, counts: bool
) -> Parameter:
    param = Parameter(torch.zeros(shape, dtype=dtype), requires_grad=False)
    compat.set_weight_attrs(param, {"weight_loader": rotation_loader(layer, k_dim, counts)})
    param.paro_loaded = set()  # type: ignore[attr-defined]
    return param


def rotation_runs(
    pairs: torch.Tensor, theta: torch.Tensor, cs: torch.Tensor, sizes: list[int]
) -> list[tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Merge identical adjacent partition rotations: [(n0, n1, pairs, theta, cs)] per run."""
    runs: list[tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor]] = []
    n0 = 0
    for p, size in enumerate(sizes):
        if runs and all(
            torch.equal(a, b[p]) for a, b in zip(runs[-1][2:], (pairs, theta, cs), strict=True)
        ):
            runs[-1] = (runs[-1][0], n0 + size, *runs[-1][2:])
        else:
            runs.append((n0, n0 + size, pairs[p], theta[p], cs[p]))
        n0 += size
    return runs


# --------------------------------------------------------------------------- linear method


def _data(layer: torch.nn.Module, name: str) -> torch.Tensor | None:
    param = getattr(layer, name, None)
    return None if param is None else param.data


@compat.weight_loader_v2
class ParoQuantLinearMethod(compat.LinearMethodBase):
    """create_weights registers the z-lab tensors; apply = rotate + scale, then the group GEMM."""

    def __init__(self, quant_config: ParoQuantConfig) -> None:
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
        """Register qweight/qzeros/scales (+ _hi planes) and the per-partition rotation tensors."""
        cfg = self.quant_config
        k, g, krot = input_size_per_partition, cfg.group_size, cfg.krot
        prefix = getattr(layer, "prefix", "?")
        align = 32 if cfg.bits == 5 else 8
        if k % g:
            raise ValueError(
                f"paro-vllm: {prefix}: K per partition {k} is not a multiple of group_size {g} "
                "(lower the tensor-parallel size)"
            )
        if any(n % align for n in output_partition_sizes):
            raise ValueError(
                f"paro-vllm: {prefix}: output partitions {output_partition_sizes} must be "
                f"multiples of {align} for int{cfg.bits}"
            )
        n, parts = sum(output_partition_sizes), len(output_partition_sizes)
        loader = extra_weight_attrs["weight_loader"]

        def packed(rows: int, factor: int) -> Any:
            return compat.PackedvLLMParameter(
                data=torch.empty(rows, n // factor, dtype=torch.int32),
                input_dim=0,
                output_dim=1,
                packed_dim=1,
                packed_factor=factor,
                weight_loader=loader,
            )

        layer.register_parameter("qweight", packed(k, 8))
        layer.register_parameter("qzeros", packed(k // g, 8))
        # f16 as stored: casting the scales to bf16 would change the dequantized grid.
        scales = compat.GroupQuantScaleParameter(
            data=torch.empty(k // g, n, dtype=torch.float16),
            input_dim=0,
            output_dim=1,
            weight_loader=loader,
        )
        layer.register_parameter("scales", scales)
        if cfg.bits == 5:
            layer.register_parameter("qweight_hi", packed(k, 32))
            layer.register_parameter("qzeros_hi", packed(k // g, 32))
        shapes = {
            "pairs": ((parts, krot, k), torch.int16),
            "theta": ((parts, krot, k // 2), torch.float16),
            "channel_scales": ((parts, 1, k), torch.float16),
        }
        for name, (shape, dtype) in shapes.items():
            param = _rotation_param(layer, shape, dtype, 1, counts=name == "pairs")
            layer.register_parameter(name, param)
        layer.paro_partition_sizes = list(output_partition_sizes)
        STATE.created += 1
        STATE.bits = cfg.bits
        STATE.backend = cfg.backend
        STATE.act = act_label(cfg.knobs, cfg.backend)

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        """Check the loaded rotations, merge identical runs, repack once for the backend."""
        cfg, prefix = self.quant_config, getattr(layer, "prefix", "?")
        sizes: list[int] = layer.paro_partition_sizes
        for name in ("pairs", "theta", "channel_scales"):
            missing = sorted(set(range(len(sizes))) - getattr(layer, name).paro_loaded)
            if missing:
                raise ValueError(f"paro-vllm: {prefix}.{name}: partitions {missing} not loaded")
        from paro_kernels.reference import check_rotation

        k = layer.qweight.shape[0]
        for p in range(len(sizes)):
            try:
                check_rotation(layer.pairs.data[p], layer.theta.data[p], k, cfg.group_size)
            except ValueError as e:
                raise ValueError(f"paro-vllm: {prefix} partition {p}: {e}") from e
        runs = rotation_runs(layer.pairs.data, layer.theta.data, layer.channel_scales.data, sizes)
        layer.paro_triton = None
        if cfg.backend == "triton":
            why = triton_backend.supported(
                cfg.bits, sizes, len(runs), cfg.knobs["PARO_ACT_FORMAT"], k
            )
            if why is not None:
                raise ValueError(f"paro-vllm: {prefix}: PARO_BACKEND=triton: {why}")
            layer.paro_triton = triton_backend.prepare(
                layer.qweight.data, layer.qzeros.data, layer.scales.data, runs, cfg.group_size,
                layer.scales.dtype if getattr(layer, "params_dtype", None) is None
                else layer.params_dtype,
                cfg.bits, _data(layer, "qweight_hi"), _data(layer, "qzeros_hi"),
            )  # fmt: skip
            layer.paro_n = sum(sizes)
            kernel_cache.record(
                kernel_cache.Layer(METHOD, tuple(sizes), k, cfg.bits, cfg.group_size,
                                   getattr(layer, "bias", None) is not None),
                layer.paro_triton, cfg.knobs,
            )  # fmt: skip
            STATE.processed += 1
            _maybe_emit_marker()
            return
        layer.paro_runs = reference_backend.prepare(
            layer.qweight.data,
            layer.qzeros.data,
            layer.scales.data,
            runs,
            cfg.bits,
            cfg.group_size,
            _data(layer, "qweight_hi"),
            _data(layer, "qzeros_hi"),
            zp_epilogue=cfg.knobs["PARO_ZP_EPILOGUE"] == "1",
        )
        layer.paro_n = sum(sizes)
        STATE.processed += 1
        _maybe_emit_marker()

    def apply(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        """y = act_quant((x * cs) R^T) dequant(Q)^T (+ bias): 2-D, backend, restore the shape."""
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        cfg = self.quant_config
        # Per call: the token count picks the decode band (per-group) or PARO_ACT_SCALE.
        act = activations.act_config(cfg.knobs, x2.shape[0], cfg.group_size)
        if getattr(layer, "paro_triton", None) is not None:
            y = triton_backend.apply(layer.paro_triton, x2.contiguous(), bias, act)
        else:
            y = reference_backend.apply(layer.paro_runs, x2, bias, act)
        return y.reshape(*shape[:-1], layer.paro_n)
