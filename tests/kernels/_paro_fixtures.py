"""Random ParoQuant layer tensors in the checkpoint layout, for the kernel tests."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from paro_kernels.formats import pack_awq, pack_bitplane


@dataclass(frozen=True)
class Layer:
    """One quantized projection in checkpoint layout (plus the raw codes for cross-checks)."""

    qweight: torch.Tensor
    qzeros: torch.Tensor
    scales: torch.Tensor
    pairs: torch.Tensor
    theta: torch.Tensor
    channel_scales: torch.Tensor
    bias: torch.Tensor | None
    codes: torch.Tensor
    zeros: torch.Tensor
    qweight_hi: torch.Tensor | None = None
    qzeros_hi: torch.Tensor | None = None

    def args(self) -> tuple[torch.Tensor, ...]:
        """Positional tensors of paro_linear / paro_linear_ref."""
        return (self.qweight, self.qzeros, self.scales, self.pairs, self.theta, self.channel_scales)

    def hi(self) -> dict[str, torch.Tensor | None]:
        """Fifth-bit planes as keyword arguments."""
        return {"qweight_hi": self.qweight_hi, "qzeros_hi": self.qzeros_hi}


def random_rotation(krot: int, k: int, g: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Random local pair permutations [krot, K] int16 and angles [krot, K/2] f16."""
    perms = [torch.randperm(g, generator=gen) for _ in range(krot * (k // g))]
    pairs = torch.stack(perms).view(krot, k).to(torch.int16)
    theta = ((torch.rand(krot, k // 2, generator=gen) * 2 - 1) * math.pi).to(torch.float16)
    return pairs, theta


def random_layer(
    k: int, n: int, g: int, bits: int = 4, krot: int = 8, seed: int = 0, bias: bool = False
) -> Layer:
    """A random layer whose zeros are asymmetric over the whole code range."""
    gen = torch.Generator().manual_seed(seed)
    top = (1 << bits) - 1
    codes = torch.randint(0, top + 1, (k, n), generator=gen, dtype=torch.int32)
    zeros = torch.randint(0, top + 1, (k // g, n), generator=gen, dtype=torch.int32)
    scales = (torch.rand(k // g, n, generator=gen) * 0.02 + 0.001).to(torch.float16)
    pairs, theta = random_rotation(krot, k, g, gen)
    cs = (torch.rand(1, k, generator=gen) * 1.5 + 0.5).to(torch.float16)
    b = (torch.randn(n, generator=gen) * 0.1).to(torch.float16) if bias else None
    hi: dict[str, torch.Tensor | None] = {}
    if bits == 5:
        hi = {"qweight_hi": pack_bitplane(codes >> 4), "qzeros_hi": pack_bitplane(zeros >> 4)}
    return Layer(
        pack_awq(codes & 0xF),
        pack_awq(zeros & 0xF),
        scales,
        pairs,
        theta,
        cs,
        b,
        codes,
        zeros,
        **hi,
    )
