"""The one-launch decode op (`gemv_mma.rotate_gemv_mma`: the Givens records rotation and the mma
GEMV as two kinds of programs of one grid) on the GPU against the fp64 reference and against the
two launches it replaces (marked gpu: never in CI)."""

from __future__ import annotations

from itertools import accumulate

import pytest
import torch
from _triton_cases import (
    W4A16_CASES,
    assert_scratch_zeroed,
    bias,
    hi_planes,
    merged_layer_bits,
    packed,
    reference,
    rel,
    runs,
)
from paro_kernels import reference as ref

pytestmark = pytest.mark.gpu

# the cases whose partition bounds lie on the mma's 32-column grid (`gemv_mma.mma_ok`)
CASES = [c for c in W4A16_CASES if all(b % 32 == 0 for b in tuple(accumulate(c[1]))[:-1])]


def _layer(k: int, sizes: list[int], g: int, bits: int):  # type: ignore[no-untyped-def]
    from paro_kernels.triton import repack

    parts = merged_layer_bits(k, sizes, g, bits, seed=k + len(sizes) + bits)
    prep = repack.prepare(*packed(parts), runs(parts), g, dtype=torch.bfloat16, device="cuda",
                          bits=bits, **hi_planes(parts))  # fmt: skip
    return parts, prep


def _want(x: torch.Tensor, parts, g: int, bits: int) -> torch.Tensor:  # type: ignore[no-untyped-def]
    if bits == 4:
        return reference(x, parts, g)
    return torch.cat([ref.paro_linear_ref(x, *p.args(), 5, g, p.bias, **p.hi()) for p in parts], 1)


@pytest.mark.parametrize(("k", "sizes", "g"), CASES)
@pytest.mark.parametrize("m", [2, 3, 8, 9, 16, 17, 24, 32])
@pytest.mark.parametrize("bits", [4, 5])
def test_one_launch_matches_fp64_and_the_two_launches(k: int, sizes: list[int], g: int, m: int,
                                                      bits: int) -> None:  # fmt: skip
    # Every activation-tile count (1, 2, 4: ragged at 3, 9, 17, 24), 1-3 partitions (one rotation
    # program per group, partition and row block: the group's count waits for all of them),
    # odd N, G = 64 and 128, row blocks of 4 (shipped), 16 and all rows; a 2-warp config beside
    # the shipped one; activations in the thousands at even M. Twice per config: the role
    # ticket and the group counts are back to zero after each launch.
    from paro_kernels.triton import gemv_mma

    parts, prep = _layer(k, sizes, g, bits)
    scale = 1e3 if m % 2 == 0 else 1.0
    x = (torch.randn(m, k, generator=torch.Generator().manual_seed(m + k)) * scale).to(
        torch.bfloat16)  # fmt: skip
    bb = bias(parts)
    xd, bd = x.cuda(), None if bb is None else bb.cuda()
    want = _want(x, parts, g, bits)
    for cfg in ({}, {"block_n": 64, "programs_per_sm": 2}):
        c = gemv_mma.mma_config(m, sum(sizes), k, g, prep.bounds, 132, bits, **cfg) if cfg else None
        two = gemv_mma.gemv_mma_linear(prep, xd, bd, c, prologue="givens")
        for rows in (-1, 16, 0):
            for _ in range(2):
                y = gemv_mma.rotate_gemv_mma(xd, prep, bd, c, rows=rows)
                assert y.shape == (m, sum(sizes)) and y.dtype == torch.bfloat16
                assert rel(y, want) <= 2e-3, (cfg, rows, rel(y, want))
                # the same products; only the split-K partials' atomic order differs
                assert rel(y, two.double().cpu()) <= 1e-3, (cfg, rows)
    assert_scratch_zeroed()


@pytest.mark.parametrize("m", [4, 16, 32])
def test_one_launch_replays_in_a_cuda_graph(m: int) -> None:
    # Captured once and replayed: each replay finds the counters zeroed by the one before and
    # gives the eager output (to the split-K partials' order) for new activations.
    from paro_kernels.triton import gemv_mma

    k, sizes, g = 1024, [512, 256, 256], 128
    parts, prep = _layer(k, sizes, g, 4)
    xs = [torch.randn(m, k, generator=torch.Generator().manual_seed(i)).to(torch.bfloat16)
          for i in range(3)]  # fmt: skip
    x = xs[0].cuda()
    gemv_mma.rotate_gemv_mma(x, prep)  # compiled and the scratch made before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = gemv_mma.rotate_gemv_mma(x, prep)
    for xi in xs:
        x.copy_(xi.cuda())
        graph.replay()
        torch.cuda.synchronize()
        assert rel(y, reference(xi, parts, g)) <= 2e-3
        assert rel(y, gemv_mma.rotate_gemv_mma(x, prep).double().cpu()) <= 1e-3
    assert_scratch_zeroed()
