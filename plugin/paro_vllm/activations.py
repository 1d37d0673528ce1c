"""Reference activation quantizers and the zero-point epilogue algebra (plain torch, fp64).

What the fast kernels feed their matrix unit, written so the reference path can honour
PARO_ACT_FORMAT / PARO_ACT_SCALE / PARO_ZP_EPILOGUE (seed log 2026-09-11/12):
- fp8: e4m3 codes, scale amax/448 per token or per group (exact OCP e4m3 rounding);
- int8: scale amax/127, round half to even, clamp +-127, integer row-sums per group;
- bf16: passthrough (W4A16), the activations rounded to bf16 only.
The decode band (M <= PARO_DECODE_MAX_M) is always per-group; PARO_ACT_SCALE picks the
granularity above it. Scales are kept in fp32, never pow2 (pow2 scales were rejected: 2.8x KL).

Zero point: with signed weight codes c' = c - off (off = 8 for int4, 16 for int5; exact in e4m3)
W[k, n] = (c'[k, n] - (z - off)[g, n]) * s[g, n], so for quantized activations a = q * asc

    y[m, n] = sum_g asc[m, g] s[g, n] sum_{k in g} q[m, k] c'[k, n]  -  sum_g rs[m, g] sz[g, n]

with rs[m, g] = asc[m, g] * sum_{k in g} q[m, k] (the row-sums) and sz = s * (z - off).
The in-loop form subtracts the zero point inside every group's product; the epilogue form
(PARO_ZP_EPILOGUE=1) keeps only the scale fold in the loop and applies the rank-G term after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import torch
from paro_kernels.formats import E4M3_MAX, e4m3_decode, e4m3_encode

ActFormat = Literal["fp8", "int8", "bf16"]
ActScale = Literal["token", "group"]
INT8_MAX = 127.0
_F64 = torch.float64


@dataclass(frozen=True)
class ActConfig:
    """Activation mode of one linear call: element format, scale granularity, ZP form."""

    format: ActFormat = "fp8"
    scale: ActScale = "token"
    zp_epilogue: bool = False
    group_size: int = 128


@dataclass(frozen=True)
class QuantAct:
    """Quantized activations: values q [M, K], scales [M, K/G] (per-token scales repeated)."""

    q: torch.Tensor  # fp64: e4m3-decoded codes, int8 integers, or bf16-rounded values
    scale: torch.Tensor  # fp64 [M, K/G]; ones for bf16
    row_sums: torch.Tensor  # fp64 [M, K/G]: sum of q per group (exact integers for int8)
    group_size: int

    def dequantize(self) -> torch.Tensor:
        """q * scale as fp64 [M, K]."""
        m, k = self.q.shape
        g = self.group_size
        return (self.q.view(m, k // g, g) * self.scale.unsqueeze(-1)).view(m, k)


def act_config(knobs: Mapping[str, str], m: int, group_size: int) -> ActConfig:
    """The mode PARO_* knobs select for a call with M tokens (decode band is always per-group)."""
    decode = m <= int(knobs["PARO_DECODE_MAX_M"])
    return ActConfig(
        format=knobs["PARO_ACT_FORMAT"],  # type: ignore[arg-type]
        scale="group" if decode else knobs["PARO_ACT_SCALE"],  # type: ignore[arg-type]
        zp_epilogue=knobs["PARO_ZP_EPILOGUE"] == "1",
        group_size=group_size,
    )


def token_act_config(knobs: Mapping[str, str], group_size: int) -> ActConfig:
    """The MXFP4 methods' mode: PARO_ACT_FORMAT with per-token scales at every M.

    The seed's MXFP4 stack (2026-09-08, 2026-09-15) quantizes activations per token in every band
    (its producer is rotate + token-quant), and the MXFP4 Triton kernels implement exactly that, so
    the reference follows it too: both backends of one method must compute the same thing.
    """
    return ActConfig(
        format=knobs["PARO_ACT_FORMAT"],  # type: ignore[arg-type]
        scale="token",
        zp_epilogue=False,
        group_size=group_size,
    )


def _amax(x: torch.Tensor, scale: ActScale, g: int) -> torch.Tensor:
    """Per-group amax [M, K/G]; per-token amax broadcast to every group of the row."""
    m, k = x.shape
    amax = x.abs().view(m, k // g, g).amax(-1)
    return amax.amax(-1, keepdim=True).expand(m, k // g) if scale == "token" else amax


def _scale(amax: torch.Tensor, top: float) -> torch.Tensor:
    # fp32 scales as the kernels hold them; a zero row/group gets 1 (its codes are all zero).
    s = (amax / top).to(torch.float32).to(_F64)
    return torch.where(s > 0, s, torch.ones_like(s))


def quantize_acts(x: torch.Tensor, cfg: ActConfig) -> QuantAct:
    """Quantize activations x [M, K] (K % G == 0) the way the selected kernel path does."""
    if x.dim() != 2 or x.shape[1] % cfg.group_size:
        raise ValueError(f"x: expected [M, K] with K % {cfg.group_size} == 0, got {list(x.shape)}")
    m, k = x.shape
    g = cfg.group_size
    xd = x.to(_F64)
    if cfg.format == "bf16":
        q = xd.to(torch.bfloat16).to(_F64)
        scale = torch.ones(m, k // g, dtype=_F64)
    elif cfg.format == "fp8":
        scale = _scale(_amax(xd, cfg.scale, g), E4M3_MAX)
        xs = xd.view(m, k // g, g) / scale.unsqueeze(-1)
        q = e4m3_decode(e4m3_encode(xs)).to(_F64).view(m, k)
    elif cfg.format == "int8":
        scale = _scale(_amax(xd, cfg.scale, g), INT8_MAX)
        xs = xd.view(m, k // g, g) / scale.unsqueeze(-1)
        q = torch.round(xs).clamp(-INT8_MAX, INT8_MAX).view(m, k)
    else:
        raise ValueError(f"act format: expected fp8, int8 or bf16, got {cfg.format!r}")
    return QuantAct(q, scale, q.view(m, k // g, g).sum(-1), g)


def fake_quant_acts(x: torch.Tensor, cfg: ActConfig) -> torch.Tensor:
    """x [M, K] quantized and dequantized (fp64): what the GEMM effectively multiplies."""
    return quantize_acts(x, cfg).dequantize()


# --------------------------------------------------------------------------- zero-point forms


def _group_products(qa: QuantAct, signed: torch.Tensor) -> torch.Tensor:
    """P[g, m, n] = sum_{k in g} q[m, k] c'[k, n] (fp64; exact integers for int8 x int codes)."""
    m, k = qa.q.shape
    g = qa.group_size
    qg = qa.q.view(m, k // g, g).transpose(0, 1)  # [K/G, M, G]
    return torch.bmm(qg, signed.to(_F64).view(k // g, g, -1))


def int_linear_inloop(
    qa: QuantAct, codes: torch.Tensor, zeros: torch.Tensor, scales: torch.Tensor
) -> torch.Tensor:
    """y [M, N] fp64 with the zero point subtracted inside every group's product (the loop FMA).

    Contract: codes [K, N] int (0..2**bits-1), zeros [K/G, N] int, scales [K/G, N] float.
    """
    k = qa.q.shape[1]
    g = qa.group_size
    centered = codes.to(_F64).view(k // g, g, -1) - zeros.to(_F64).unsqueeze(1)
    p = _group_products(qa, centered.view(k, -1))  # [K/G, M, N]
    fold = qa.scale.t().unsqueeze(-1) * scales.to(_F64).unsqueeze(1)  # asc[m,g] * s[g,n]
    return (p * fold).sum(0)


def int_linear_epilogue(
    qa: QuantAct, codes: torch.Tensor, zeros: torch.Tensor, scales: torch.Tensor, bits: int
) -> torch.Tensor:
    """Same y with only the scale fold in the loop and sum_g rs[m,g] * s*(z-off)[g,n] after it."""
    off = 1 << (bits - 1)
    p = _group_products(qa, codes.to(_F64) - off)  # signed codes c - off, exact in e4m3
    s = scales.to(_F64)
    loop = (p * (qa.scale.t().unsqueeze(-1) * s.unsqueeze(1))).sum(0)
    rs = qa.scale * qa.row_sums  # [M, K/G]
    sz = s * (zeros.to(_F64) - off)  # [K/G, N]
    return loop - rs @ sz


def int_linear(
    x_rot: torch.Tensor,
    codes: torch.Tensor,
    zeros: torch.Tensor,
    scales: torch.Tensor,
    bits: int,
    cfg: ActConfig,
) -> torch.Tensor:
    """Rotated activations x_rot [M, K] through act quant and the int GEMM in the chosen ZP form."""
    qa = quantize_acts(x_rot, cfg)
    if cfg.zp_epilogue:
        return int_linear_epilogue(qa, codes, zeros, scales, bits)
    return int_linear_inloop(qa, codes, zeros, scales)
