"""Merged (multi-partition) random ParoQuant layers and their fp64 reference, for the Triton tests."""

from __future__ import annotations

import torch
from _paro_fixtures import Layer, random_layer
from paro_kernels import reference as ref

# (K, partition sizes, G): tile-boundary and odd N, K not a multiple of the split, 1-3 partitions.
# The bf16 floor of a GEMM on bf16 weights: the dequant path's W' rounded to bf16 and y rounded
# to bf16 (H200 2026-12-01: 2.2-2.7e-3 on the W4A16 cases; fp16 W' 1.7e-3).
BF16_W_FLOOR = 3.5e-3
# W4A8 / W5A8 prefill on the vendor 8-bit GEMM (H200 2026-12-02, `dequant.w8_linear`): per-token
# 8-bit activations and W' requantized to 8 bits per output channel, against the format's fp64
# reference (its own per-group activation quantization); measured on the H200, see
# docs/notebook/kernels-2026-11-29-to-12-06.md.
W8_TOL = {"int8": 2.5e-2, "fp8": 6e-2}

W4A16_CASES = [
    (128, [264], 128),
    (640, [1000], 64),
    (1536, [208, 136], 64),
    (1024, [512, 128, 128], 128),
    (2304, [2048, 256], 128),
]


def merged_layer(k: int, sizes: list[int], g: int, seed: int, bias: bool) -> list[Layer]:
    """One random layer per output partition (each with its own rotation)."""
    return [random_layer(k, n, g, seed=seed + 7 * i, bias=bias) for i, n in enumerate(sizes)]


def runs(parts: list[Layer]) -> list[tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(n0, n1, pairs, theta, cs) per partition, as the plugin's rotation_runs yields them."""
    out, n0 = [], 0
    for layer in parts:
        n1 = n0 + layer.scales.shape[1]
        out.append((n0, n1, layer.pairs, layer.theta, layer.channel_scales))
        n0 = n1
    return out


def packed(parts: list[Layer]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The merged checkpoint tensors: AWQ words concatenate along N/8 because n_p % 8 == 0."""
    cat = [torch.cat([getattr(layer, a) for layer in parts], 1) for a in ("qweight", "qzeros")]
    return cat[0], cat[1], torch.cat([layer.scales for layer in parts], 1)


def bias(parts: list[Layer]) -> torch.Tensor | None:
    """The merged bias (or None)."""
    if parts[0].bias is None:
        return None
    return torch.cat([layer.bias for layer in parts if layer.bias is not None])


def reference(x: torch.Tensor, parts: list[Layer], g: int) -> torch.Tensor:
    """fp64 reference of the merged linear: each partition with its own rotation."""
    outs = [ref.paro_linear_ref(x.cpu(), *p.args(), 4, g, p.bias) for p in parts]
    return torch.cat(outs, dim=-1)


def rel(y: torch.Tensor, r: torch.Tensor) -> float:
    """Frobenius relative error against the reference; NaN never passes."""
    e = ((y.cpu().double() - r).norm() / r.norm()).item()
    return e if e == e else float("inf")


# --------------------------------------------------------------------------- W4A8 / W5A8


def merged_layer_bits(k: int, sizes: list[int], g: int, bits: int, seed: int) -> list[Layer]:
    """One random int4/int5 layer per output partition (each with its own rotation)."""
    from _paro_fixtures import random_layer as rl

    return [rl(k, n, g, bits=bits, seed=seed + 7 * i, bias=True) for i, n in enumerate(sizes)]


def hi_planes(parts: list[Layer]) -> dict[str, torch.Tensor]:
    """The merged fifth-bit planes (keyword arguments of `repack.prepare`), {} for int4."""
    if parts[0].qweight_hi is None:
        return {}
    return {
        a: torch.cat([getattr(layer, a) for layer in parts], 1) for a in ("qweight_hi", "qzeros_hi")
    }


def reference_a8(
    x: torch.Tensor, parts: list[Layer], g: int, bits: int, fmt: str, scale: str
) -> torch.Tensor:
    """fp64 W4A8/W5A8 reference of the merged linear (acts quantized by the plugin's rules)."""
    outs = [
        ref.paro_linear_a8_ref(x.cpu(), *p.args(), fmt, scale, bits, g, p.bias, **p.hi())
        for p in parts
    ]
    return torch.cat(outs, dim=-1)


def exact_gemm(
    q: torch.Tensor, asc: torch.Tensor, parts: list[Layer], g: int, bits: int
) -> torch.Tensor:
    """fp64 GEMM of the kernel's own codes and scales with the exact weights (+ bias)."""
    outs = []
    for i, p in enumerate(parts):
        qi, ai = q[i].cpu().double(), asc[i].cpu().double()
        m, k = qi.shape
        xq = (qi.view(m, k // g, g) * ai.unsqueeze(-1)).view(m, k)
        w = ref.dequantize(p.qweight, p.qzeros, p.scales, bits, g, **p.hi())
        y = xq @ w.t()
        outs.append(y if p.bias is None else y + p.bias.double())
    return torch.cat(outs, dim=-1)


# The scratch buffers the split-K GEMVs must leave zeroed (fp32 sums and tickets: the next call
# adds into them); `launch.scratch`'s others (dequantized weights, activations, 8-bit
# weights and their scales) are written whole by each call.
ZEROED_SCRATCH = ("gemv_ws", "gemv_cnt")


def assert_scratch_zeroed() -> None:
    """Every split-K workspace and ticket buffer the process made is back to zero."""
    from paro_kernels.triton import launch

    for (kind, _), buf in launch._WS.items():
        if kind in ZEROED_SCRATCH:
            assert not buf.any(), kind
