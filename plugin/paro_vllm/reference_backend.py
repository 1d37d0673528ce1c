"""The torch reference backend of the ParoQuant linear: plain torch, runs wherever torch runs.

Same math as `paro_kernels.torch_ops.paro_linear`, with everything that does not depend on the
activations computed once at load: each rotation run's `krot` Givens layers and its channel
scales are folded into one block-diagonal matrix diag(cs_g) R_g^T per group (fp64, stored fp32),
and the weight is dequantized once to fp32 W^T. Per call: one batched [G x G] product per run
(the activation rotation), the activation quantization PARO_ACT_FORMAT / PARO_ACT_SCALE select
(`activations.py` is the definition; `fake_quant` here is its fast twin, equal bit for bit) and
one fp32 GEMM; results are rounded to the activation dtype once. fp32 keeps the output at the
bf16 floor of the fp64 reference (a bf16 weight cache would not: (c - z) * s needs ~15 mantissa
bits).

Zero point (PARO_ZP_EPILOGUE): the in-loop form holds W^T = (c - z) * s; the epilogue form holds
the signed-code weight (c - off) * s and sz = s * (z - off), and subtracts rs @ sz after the GEMM
(rs = per-group sums of the quantized activations). Every term is exact in fp32, so both forms
agree to fp32 summation order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from paro_kernels import reference as ref
from paro_kernels.formats import E4M3_MAX
from paro_kernels.torch_ops import dequantize_weight

from .activations import INT8_MAX, ActConfig

_F64 = torch.float64
E4M3_MIN_EXP = -6  # smallest normal binade of e4m3fn; below it the spacing is 2**-9
E4M3_MANTISSA = 3


@dataclass(frozen=True)
class Run:
    """Adjacent output partitions sharing one rotation: their columns, rotation and weight."""

    n0: int
    n1: int
    rot: torch.Tensor  # [K/G, G, G] fp32: diag(cs_g) R_g^T for every group g
    w: torch.Tensor  # [K, n1 - n0] fp32: W^T, or (c - off) * s when sz is set (epilogue form)
    sz: torch.Tensor | None = None  # [K/G, n1 - n0] fp32 s * (z - off): zero point as epilogue


def rotation_blocks(
    pairs: torch.Tensor, theta: torch.Tensor, channel_scales: torch.Tensor, group_size: int
) -> torch.Tensor:
    """diag(cs_g) R_g^T per group, [K/G, G, G] fp32, built by rotating the identity in fp64.

    Contract: pairs [krot, K] int16, theta [krot, K/2], channel_scales [1, K]; K % G == 0.
    """
    k, g = pairs.shape[1], group_size
    # Row i holds e_i in every group; rotation is group-local, so rotating it yields row i of
    # every R_g^T at once.
    eye = torch.eye(g, dtype=torch.float64).repeat(1, k // g)
    rt = ref.rotate(eye, pairs, theta, g).view(g, k // g, g).permute(1, 0, 2)
    return (rt * channel_scales.to(torch.float64).view(k // g, g, 1)).float().contiguous()


def prepare(
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    rotations: list[tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor]],
    bits: int,
    group_size: int,
    qweight_hi: torch.Tensor | None = None,
    qzeros_hi: torch.Tensor | None = None,
    zp_epilogue: bool = False,
) -> tuple[Run, ...]:
    """Dequantize once and fold each run's rotation; rotations = (n0, n1, pairs, theta, cs)."""
    wt = dequantize_weight(
        qweight, qzeros, scales, bits, group_size, qweight_hi, qzeros_hi, torch.float32
    )
    sz = None
    if zp_epilogue:
        _, zeros = ref.unpack_codes(qweight, qzeros, bits, qweight_hi, qzeros_hi)
        k, n = wt.shape
        sz = scales.float() * (zeros.float() - (1 << (bits - 1)))
        # (c - z) s + (z - off) s = (c - off) s: each term and the sum are exact in fp32.
        wt = (wt.view(k // group_size, group_size, n) + sz.unsqueeze(1)).view(k, n)
    return tuple(
        Run(
            n0,
            n1,
            rotation_blocks(p, t, cs, group_size),
            wt[:, n0:n1].contiguous(),
            None if sz is None else sz[:, n0:n1].contiguous(),
        )
        for n0, n1, p, t, cs in rotations
    )


def _rotate(x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    m, k = x.shape
    groups, g, _ = rot.shape
    xg = x.view(m, groups, g).transpose(0, 1)  # [K/G, M, G]: one batched product per group
    return torch.bmm(xg, rot).transpose(0, 1).reshape(m, k)


def _e4m3_round(v: torch.Tensor) -> torch.Tensor:
    """v (fp64) to the nearest e4m3fn value, ties to even, saturating at +-448 (fp64)."""
    # The binade 2**e of |v| from the fp64 exponent field; the grid step is 2**(e - 3), built
    # directly as fp64 bits (frexp/ldexp cost 10x more on CPU).
    e = ((v.view(torch.int64) >> 52) & 0x7FF) - 1023
    step = ((e.clamp(min=E4M3_MIN_EXP) - E4M3_MANTISSA + 1023) << 52).view(_F64)
    # v / step is exact (power of two) and torch.round is half-to-even: RNE on the e4m3 grid,
    # across the subnormal seam; a value rounding past 448 saturates as e4m3_encode does.
    return (torch.round(v / step) * step).clamp(-E4M3_MAX, E4M3_MAX)


def fake_quant(x: torch.Tensor, cfg: ActConfig) -> torch.Tensor:
    """fp32 x [M, K] quantized and dequantized as `activations.fake_quant_acts` (fp32 result).

    Codes and scales are bit-identical to activations.py (fp32 scales from fp64 amax / top, fp64
    division and rounding); only the final q * scale is rounded to fp32 for the GEMM.
    Contract: cfg.format fp8 or int8, K % cfg.group_size == 0.
    """
    m, k = x.shape
    g = cfg.group_size
    xg = x.view(m, k // g, g)
    amax = xg.abs().amax(-1)  # exact in fp32
    if cfg.scale == "token":
        amax = amax.amax(-1, keepdim=True)
    top = E4M3_MAX if cfg.format == "fp8" else INT8_MAX
    scale = (amax.to(_F64) / top).float().to(_F64)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale)).unsqueeze(-1)
    xs = xg.to(_F64) / scale
    q = _e4m3_round(xs) if cfg.format == "fp8" else torch.round(xs).clamp(-INT8_MAX, INT8_MAX)
    return (q * scale).float().view(m, k)


def apply(
    runs: tuple[Run, ...],
    x: torch.Tensor,
    bias: torch.Tensor | None,
    act: ActConfig | None = None,
) -> torch.Tensor:
    """y = act_quant((x * cs) R^T) W^T (+ bias) for x [M, K] -> [M, N] in x.dtype (fp32 inside).

    act None or format bf16 keeps the rotated activations in fp32 (W4A16); a run with sz applies
    the zero point as the epilogue product.
    """
    xf = x.float()
    quantized = act is not None and act.format != "bf16"
    outs = []
    for run in runs:
        xr = _rotate(xf, run.rot)
        if quantized:
            xr = fake_quant(xr, act)  # type: ignore[arg-type]
        y = xr @ run.w
        if run.sz is not None:
            groups = run.sz.shape[0]
            y = y - xr.view(xr.shape[0], groups, -1).sum(-1) @ run.sz
        outs.append(y)
    y = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)
