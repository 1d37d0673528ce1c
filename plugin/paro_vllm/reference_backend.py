"""The torch reference backend of the ParoQuant linear: plain torch, runs wherever torch runs.

Same math as `paro_kernels.torch_ops.paro_linear`, with everything that does not depend on the
activations computed once at load: each rotation run's `krot` Givens layers and its channel
scales are folded into one block-diagonal matrix diag(cs_g) R_g^T per group (fp64, stored fp32),
and the weight is dequantized once to fp32 W^T. Per call: one batched [G x G] product per run
(the activation rotation) and one fp32 GEMM; results are rounded to the activation dtype once.
fp32 keeps the output at the bf16 floor of the fp64 reference (a bf16 weight cache would not:
(c - z) * s needs ~15 mantissa bits).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from paro_kernels import reference as ref
from paro_kernels.torch_ops import dequantize_weight


@dataclass(frozen=True)
class Run:
    """Adjacent output partitions sharing one rotation: their columns, rotation and weight."""

    n0: int
    n1: int
    rot: torch.Tensor  # [K/G, G, G] fp32: diag(cs_g) R_g^T for every group g
    w: torch.Tensor  # [K, n1 - n0] fp32: dequantized W^T of these columns


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
) -> tuple[Run, ...]:
    """Dequantize once and fold each run's rotation; rotations = (n0, n1, pairs, theta, cs)."""
    wt = dequantize_weight(
        qweight, qzeros, scales, bits, group_size, qweight_hi, qzeros_hi, torch.float32
    )
    return tuple(
        Run(n0, n1, rotation_blocks(p, t, cs, group_size), wt[:, n0:n1].contiguous())
        for n0, n1, p, t, cs in rotations
    )


def _rotate(x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    m, k = x.shape
    groups, g, _ = rot.shape
    xg = x.view(m, groups, g).transpose(0, 1)  # [K/G, M, G]: one batched product per group
    return torch.bmm(xg, rot).transpose(0, 1).reshape(m, k)


def apply(runs: tuple[Run, ...], x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """y = ((x * cs) R^T) W^T (+ bias) for x [M, K] -> [M, N] in x.dtype (fp32 inside)."""
    xf = x.float()
    outs = [_rotate(xf, run.rot) @ run.w for run in runs]
    y = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)
