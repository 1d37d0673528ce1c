"""The int4 / int5 decode and prefill paths on the GPU against the fp64 reference (marked gpu:
never in CI).

Every path the M-band dispatch can pick, forced one at a time (`path=`), across tile
boundaries, odd N and K, 1-3 partitions and both group sizes: the decode GEMV (block prologue:
the FMA path at M <= 4, its 16-row matrix-unit path at M = 16 (G = 64 goes to the
tile kernels there); and the 2026-12-01 Givens layers inside), the tile kernels with the in-kernel
split-K finish, the `gemv_dot` matrix-unit GEMV (weights as the register operand; G = 64 goes to
the tile kernels), and the prefill dequantize + rotate + cuBLAS (int4, and int5's fifth bits).
"""

from __future__ import annotations

import pytest
import torch
from _triton_cases import (
    BF16_W_FLOOR,
    W4A16_CASES,
    assert_scratch_zeroed,
    bias,
    hi_planes,
    merged_layer,
    merged_layer_bits,
    packed,
    reference,
    rel,
    runs,
)

pytestmark = pytest.mark.gpu

CASES = W4A16_CASES  # tile-boundary and odd N, K not a multiple of the split, 1-3 parts
PATH_MS = {"gemv": [1, 2], "mma": [1, 5, 16, 17], "dequant": [1, 17, 256, 300],
           "gemv-prologue": [1, 2], "gemv3": [1, 9, 16], "gemv-h2": [1, 2],
           }  # fmt: skip


def _prep(k: int, sizes: list[int], g: int, b: bool):  # type: ignore[no-untyped-def]
    from paro_kernels.triton import repack

    parts = merged_layer(k, sizes, g, seed=k + len(sizes), bias=b)
    return parts, repack.prepare(*packed(parts), runs(parts), g, device="cuda")


@pytest.mark.parametrize(("k", "sizes", "g"), CASES)
@pytest.mark.parametrize(("path", "m"), [(p, m) for p, ms in PATH_MS.items() for m in ms])
def test_path_matches_fp64_reference(k: int, sizes: list[int], g: int, path: str, m: int) -> None:
    from paro_kernels.triton import route

    parts, prep = _prep(k, sizes, g, b=m % 2 == 1)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m + k)).to(torch.bfloat16)
    bb = bias(parts)
    xd, bd = x.cuda(), None if bb is None else bb.cuda()
    # as served: with the Givens tables (the GEMV rotates inside, H200 2026-12-02); "gemv-prologue":
    # the GEMV without them (the sliced prologue; what gfx1201 and table-less layers run)
    gv = (None, None) if path == "gemv-prologue" else (prep.gv_idx, prep.gv_coef)
    forced = "gemv" if path == "gemv-prologue" else path
    y = route.w4a16_linear(xd, prep.rot_hi, prep.rot_lo, prep.qweight, prep.scales, prep.zeros,
                           prep.bounds, g, bd, *gv, path=forced)  # fmt: skip
    again = route.w4a16_linear(xd, prep.rot_hi, prep.rot_lo, prep.qweight, prep.scales,
                              prep.zeros, prep.bounds, g, bd, *gv, path=route)  # fmt: skip
    torch.cuda.synchronize()
    assert y.shape == (m, sum(sizes)) and y.dtype == torch.bfloat16
    want = reference(x, parts, g)
    tol = BF16_W_FLOOR if path == "dequant" else 2e-3  # dequant: bf16 W' (H200 2026-12-01)
    assert rel(y, want) <= tol
    # The split-K workspace and tickets were left zeroed, so a second call is as good (its
    # atomics may add in another order: bf16 ties may flip, hence not bit-equal).
    assert rel(again, want) <= tol

    assert_scratch_zeroed()


@pytest.mark.parametrize("scale", [1e3, 1e-3])
@pytest.mark.parametrize("m", [1, 2])
def test_h2_gemv_range(scale: float, m: int) -> None:
    # The HFMA2 GEMV's fp16 products and pair sums (`gemv_fma_kernels`' note): rotated
    # activations in the thousands (|x| ~ 1e3, 4 sigma 4e3) neither overflow nor
    # lose precision, and small ones (|x| ~ 1e-3: subnormal after the 2^-6) keep the bf16 floor.
    from paro_kernels.triton import route

    k, sizes = 2304, [2048, 256]
    parts, prep = _prep(k, sizes, 128, b=False)
    x = (torch.randn(m, k, generator=torch.Generator().manual_seed(m)) * scale).to(torch.bfloat16)
    y = route.w4a16_linear(x.cuda(), prep.rot_hi, prep.rot_lo, prep.qweight, prep.scales,
                          prep.zeros, prep.bounds, 128, None, path="gemv-h2")  # fmt: skip
    assert torch.isfinite(y).all()
    assert rel(y, reference(x, parts, 128)) <= 2e-3


@pytest.mark.parametrize(("k", "sizes"), [(k, s) for k, s, g in CASES if g == 128])
@pytest.mark.parametrize("scale", [1.0, 1e3])
@pytest.mark.parametrize("m", [1, 2])
@pytest.mark.parametrize("prologue", ["slice", "givens"])
def test_h2_prologues_match_fp64(k: int, sizes: list[int], scale: float, m: int,
                                 prologue: str) -> None:  # fmt: skip
    # The HFMA2 op with either paired prologue (the folded blocks, or the 2026-12-04
    # records kernel, forced whatever gemv_fma.H2_PROLOGUE says) across the tile-boundary
    # cases, activations in the thousands too; the two prologues' xr agree to fp16 rounding.
    from paro_kernels.triton import gemv_fma
    from paro_kernels.triton.prologue import rotate_givens_paired, rotate_slices

    parts, prep = _prep(k, sizes, 128, b=m == 1)
    assert prep.gv_idx is not None and prep.gv_coef is not None
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m + k)) * scale
    x = x.to(torch.bfloat16)
    bb = bias(parts)
    y = gemv_fma.gemv_h2_linear(prep, x.cuda(), None if bb is None else bb.cuda(),
                                prologue=prologue)  # fmt: skip
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()
    assert rel(y, reference(x, parts, 128)) <= 2e-3
    xg = rotate_givens_paired(x.cuda(), prep.gv_idx, prep.gv_coef, 128)
    xs = rotate_slices(x.cuda(), prep.rot_hi, prep.rot_lo, 128, paired=True)[0]
    assert rel(xg, xs.double().cpu()) <= 2e-3


def _on_the_mma_grid(sizes: list[int]) -> bool:
    """`gemv_mma.mma_ok` of the layer's partition bounds (the running sums of `sizes`)."""
    from itertools import accumulate

    from paro_kernels.triton import gemv_mma

    return gemv_mma.mma_ok(tuple(accumulate(sizes))[:-1])


def test_mma_gemv_refuses_bounds_off_its_grid() -> None:
    # Partition bounds off the 32-column grid (an mma's 32 columns) are refused by name, and
    # the dispatch keeps such a layer off the mma GEMV.
    from paro_kernels.triton import gemv_mma, route

    k, sizes, g = next(c for c in CASES if not _on_the_mma_grid(c[1]))
    _, prep = _prep(k, sizes, g, b=False)
    assert not gemv_mma.mma_ok(prep.bounds)
    assert not route.mma_gemv_ok(False, 2, g, prep.bounds)
    with pytest.raises(ValueError, match="partition bounds"):
        gemv_mma.mma_config(2, sum(sizes), k, g, prep.bounds, 132)


@pytest.mark.parametrize(("k", "sizes", "g"), [c for c in CASES if _on_the_mma_grid(c[1])])
@pytest.mark.parametrize("m", [1, 2, 3, 5, 8, 9, 16, 17, 24, 32, 33, 47, 64])
@pytest.mark.parametrize(
    "cfg", [{}, {"block_n": 64, "programs_per_sm": 2}, {"block_n": 256, "programs_per_sm": 4}]
)
def test_mma_gemv_matches_fp64(k: int, sizes: list[int], g: int, m: int,
                               cfg: dict[str, int]) -> None:  # fmt: skip
    # The mma.sync GEMV (`gemv_mma_kernels`, 2026-12-04): its lane mapping, split-K finish and
    # both paired prologues (records, blocks) at pair shift 0, across the tile-boundary cases
    # the GEMV takes (odd N, 1-3 partitions, G = 64 and 128), every output row a thread can own
    # (M <= 8: one 8-row activation tile; M = 9, 16: two; M = 17..32: four; M = 33..64: 32-row
    # chunks of four on the grid's third axis, a partial last chunk at 33 and 47; forced where
    # the dispatch does not serve them), and 2- and 8-warp tiles;
    # activations in the thousands at even M (fp32 accumulation: no fp16 range). (The case off
    # its grid: the refusal test above, once rather than at each M and config.)
    from paro_kernels.triton import gemv_mma

    scale = 1e3 if m % 2 == 0 else 1.0
    parts, prep = _prep(k, sizes, g, b=m % 2 == 1)
    assert gemv_mma.mma_ok(prep.bounds)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m + k)) * scale
    x = x.to(torch.bfloat16)
    bb = bias(parts)
    c = gemv_mma.mma_config(m, sum(sizes), k, g, prep.bounds, 132, **cfg)
    want = reference(x, parts, g)
    for prologue in ("givens", "slice") if m <= 32 else ("slice",):  # records: 32 rows at most
        for _ in range(2):  # the second call finds the split-K workspace and tickets zeroed
            y = gemv_mma.gemv_mma_linear(prep, x.cuda(), None if bb is None else bb.cuda(), c,
                                         prologue=prologue)  # fmt: skip
            assert y.shape == (m, sum(sizes)) and y.dtype == torch.bfloat16
            assert torch.isfinite(y).all()
            assert rel(y, want) <= 2e-3, (prologue, rel(y, want))
    assert_scratch_zeroed()


@pytest.mark.parametrize(("k", "sizes", "g"), CASES)
@pytest.mark.parametrize("m", [3, 9, 16, 17, 24, 32])
@pytest.mark.parametrize("rows", [4, 8, 16])
def test_givens_prologue_row_blocks(k: int, sizes: list[int], g: int, m: int, rows: int) -> None:
    # The records prologue in blocks of `rows` rows (2026-12-06; ragged last blocks at
    # M = 9, 17, 24 / 16): bit for bit the one-program-for-all-rows output, paired (both
    # shifts) and plain, and the paired one against the blocks prologue to fp16 rounding.
    from paro_kernels.triton import prologue

    _, prep = _prep(k, sizes, g, b=False)
    assert prep.gv_idx is not None and prep.gv_coef is not None
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m + k)).to(torch.bfloat16)
    x = x.cuda()
    for shift, paired in ((0, True), (6, True), (0, False)):
        one = prologue.rotate_givens_paired(x, prep.gv_idx, prep.gv_coef, g, shift,
                                             paired=paired, rows=0)  # fmt: skip
        blk = prologue.rotate_givens_paired(x, prep.gv_idx, prep.gv_coef, g, shift,
                                             paired=paired, rows=rows)  # fmt: skip
        assert torch.equal(one, blk), (shift, paired)
        if shift == 0 and paired:
            xs = prologue.rotate_slices(x, prep.rot_hi, prep.rot_lo, g, paired=True,
                                         pair_shift=0)[0]  # fmt: skip
            assert rel(blk.double().cpu(), xs.double().cpu()) <= 2e-3


@pytest.mark.parametrize(("k", "sizes", "g"), CASES[3:])
@pytest.mark.parametrize("m", [1, 2])
def test_gemv_with_givens_inside(k: int, sizes: list[int], g: int, m: int) -> None:
    # The FMA GEMV with the Givens layers inside (H200 2026-12-02), forced at both of its row
    # counts: as served it takes only M = 1 layers the HFMA2 GEMV cannot (G = 64).
    from paro_kernels.triton import gemv_fma

    parts, prep = _prep(k, sizes, g, b=True)
    assert prep.gv_idx is not None
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.bfloat16)
    y = gemv_fma.gemv_w4a16(prep, x.cuda(), bias(parts).cuda(), fused=True, h2=False)  # type: ignore[union-attr]
    assert rel(y, reference(x, parts, g)) <= 2e-3


@pytest.mark.parametrize(
    ("prologue", "pdl"), [("slice", False), ("slice", True), ("block", False), ("givens", False)]
)
@pytest.mark.parametrize("cfg", ["big", "small"])
@pytest.mark.parametrize("m", [1, 16])
def test_gemv3_configs_and_prologues(prologue: str, cfg: str, pdl: bool, m: int) -> None:
    # The `gemv_dot` matrix-unit GEMV at both shipped configs (the small-layer one serves
    # every test shape as served), each prologue; PDL with the sliced prologue, the only one it
    # applies to (`gemv_dot.gemv3_linear`: the block and records prologues launch plain either way,
    # so their PDL cases ran the same launches twice); 5 groups: odd split-K tails.
    from paro_kernels.triton import gemv_dot

    k, sizes = 640, [512, 256, 128]
    parts, prep = _prep(k, sizes, 128, b=m % 2 == 1)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.bfloat16)
    big = dict(block_n=gemv_dot.GEMV3_BLOCK_N, num_warps=gemv_dot.GEMV3_WARPS,
               programs_per_sm=gemv_dot.GEMV3_PROGRAMS_PER_SM, gpi=gemv_dot.GEMV3_GPI,
               num_stages=gemv_dot.GEMV3_STAGES)  # fmt: skip
    kw = big if cfg == "big" else gemv_dot.GEMV3_SMALL
    c = gemv_dot.gemv3_config(m, sum(sizes), k, 128, prep.bounds, 132, **kw)
    bb = bias(parts)
    for _ in range(2):  # the second call finds the split-K workspace and tickets zeroed
        y = gemv_dot.gemv3_linear(prep, x.cuda(), None if bb is None else bb.cuda(), prologue,
                                  c, pdl)  # fmt: skip
        assert rel(y, reference(x, parts, 128)) <= 2e-3
    assert_scratch_zeroed()


@pytest.mark.parametrize("m", [2, 300])
def test_dequant_int5(m: int) -> None:
    from paro_kernels import reference as ref
    from paro_kernels.triton import dequant, repack

    k, sizes, g = 1024, [256, 128], 128
    parts = merged_layer_bits(k, sizes, g, 5, seed=m)
    prep = repack.prepare(*packed(parts), runs(parts), g, device="cuda", bits=5, **hi_planes(parts))
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.bfloat16)
    want = torch.cat([ref.paro_linear_ref(x, *p.args(), 5, g, p.bias, **p.hi()) for p in parts], 1)
    for trans, dtype in ((True, torch.bfloat16), (False, torch.bfloat16), (True, torch.float16)):
        w = dequant.dequant_rotate(prep, dtype=dtype, trans=trans)
        y = dequant.dequant_linear(x.cuda(), w, bias(parts).cuda())  # type: ignore[union-attr]
        tol = BF16_W_FLOOR if dtype == torch.bfloat16 else 2e-3
        assert y.dtype == torch.bfloat16 and rel(y, want) <= tol, (trans, dtype)


@pytest.mark.parametrize(("k", "sizes", "g"), [CASES[0], CASES[-1]])
def test_dequant_kernels_agree(k: int, sizes: list[int], g: int) -> None:
    # both weight-pass kernels (the transposed one ships on NVIDIA, the other on gfx1201), bf16
    # W' (the bf16 activations' floor) and fp16 W' (cast path), against the fp64 reference
    from paro_kernels.triton import dequant

    parts, prep = _prep(k, sizes, g, b=True)
    x = torch.randn(1030, k, generator=torch.Generator().manual_seed(k)).to(torch.bfloat16)
    want = reference(x, parts, g)
    for trans, dtype in ((True, torch.bfloat16), (False, torch.bfloat16), (True, torch.float16)):
        w = dequant.dequant_rotate(prep, dtype=dtype, trans=trans)
        y = dequant.dequant_linear(x.cuda(), w, bias(parts).cuda())  # type: ignore[union-attr]
        assert rel(y, want) <= (BF16_W_FLOOR if dtype == torch.bfloat16 else 2e-3), (trans, dtype)


def test_every_output_written_and_rows_independent() -> None:
    from paro_kernels.triton import route

    _, prep = _prep(512, [192, 64], 64, b=False)
    for path, m, sub in (("gemv", 2, 1), ("mma", 9, 3), ("dequant", 260, 3)):
        x = torch.randn(m, 512, device="cuda", dtype=torch.bfloat16)
        y = route.w4a16_linear(x, prep.rot_hi, prep.rot_lo, prep.qweight, prep.scales,
                              prep.zeros, prep.bounds, 64, path=path)  # fmt: skip
        assert torch.isfinite(y).all()
        ys = route.w4a16_linear(x[:sub].contiguous(), prep.rot_hi, prep.rot_lo, prep.qweight,
                               prep.scales, prep.zeros, prep.bounds, 64, path=path)  # fmt: skip
        # the same rows at the bound of test_triton_gpu's twin: one bf16 ulp of their largest
        # output (the two calls may run other configs, whose split-K sums add in any order; a
        # row leaking into another would be O(|y|) off)
        want = y[:sub].float()
        torch.testing.assert_close(ys.float(), want, rtol=1.6e-2,
                                   atol=want.abs().max().item() * 2**-8)  # fmt: skip


def test_graph_capture_replays_every_band() -> None:
    from paro_kernels.triton import ops, route

    _, prep = _prep(1024, [512, 128, 128], 128, b=False)
    for m in (1, 8, 16, 300):
        x = torch.randn(m, 1024, device="cuda", dtype=torch.bfloat16)
        ops.linear(prep, x)  # compile outside the capture
        graph, static_x = torch.cuda.CUDAGraph(), x.clone()
        with torch.cuda.graph(graph):
            static_y = ops.linear(prep, static_x)
        static_x.copy_(torch.randn_like(x))
        graph.replay()
        torch.testing.assert_close(static_y, route.linear(prep, static_x))
