"""The MXFP4 Triton linear on the GPU against the fp64 reference (marked gpu: never in CI).

Tolerances: fp32 accumulation of exact products, so the bf16 output rounding (~1.1e-3 relative
RMS) is the floor: 2e-3. MXFP4-PARO W4A8 end to end allows 1e-2: the prologue rounds the rotated
activations to fp16 before the e4m3 quantizer, which then picks the neighbouring code for ~0.4%
of the elements (one e4m3 step, 6-12%); its GEMM alone is held to 2e-3 on its own codes. Both
prologues are checked: the fused rotate + token-quant one (prologue.rotate_quant) and the two-launch
rotate_scale + fp8_quant one.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch
from _triton_cases import BF16_W_FLOOR  # a layer on a bf16 W' (the dequant paths)
from paro_kernels import mx
from paro_kernels import reference as ref
from paro_kernels.formats import e4m3_decode
from paro_kernels.triton import mx_repack
from test_triton_mx_cpu import fp8_linear_ref, mx_layer, paro_ref, plane_ref, rel

pytestmark = pytest.mark.gpu

BF16_FLOOR = 2e-3
# (K, N): K/32 odd (a padded last block pair), N an odd multiple of the 128 / 64 tiles, N ragged.
CASES = [(544, 384), (1024, 320), (5120, 1000)]
MS_FULL = [*range(1, 18), 33, 257]
MS = [1, 16, 17, 33, 257]
GRID = [(c, m) for c in CASES[:1] for m in MS_FULL] + [(c, m) for c in CASES[1:] for m in MS]


@cache
def _layer(n: int, k: int, e_lo: int = -14, e_hi: int = -3):  # type: ignore[no-untyped-def]

    weight, scale = mx_layer(n, k, seed=n + k, e_lo=e_lo, e_hi=e_hi)
    w = mx.mxfp4_dequantize(weight, scale)
    return weight, scale, w, mx_repack.prepare(weight, scale, None, 0, "cuda")


def _x(m: int, k: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.randn(m, k, generator=torch.Generator().manual_seed(m * 7 + k)).to(dtype)


def _served(act: str, m: int, n: int, bounds: tuple[int, ...] = (), rot: bool = False,
            w: Any = None, dtype: torch.dtype = torch.bfloat16) -> str:  # fmt: skip
    """The activations an M-row call is served on: decode rows take 16-bit ones (to M = 16 on
    the mma GEMV where it takes the layer; w: the layer's MxWeight, for the 8-bit route's fold,
    which takes bf16 x only)."""
    from paro_kernels.triton import launch, mx_route

    hip = launch.is_hip()
    return mx_route.served_act(m, act, hip, n, bounds, rot, w, dtype)  # type: ignore[arg-type]


@pytest.mark.parametrize("act", ["fp8", "a16"])
@pytest.mark.parametrize(("case", "m"), GRID)
def test_mxfp4_linear_matches_fp64_reference(case: tuple[int, int], m: int, act: str) -> None:
    from paro_kernels.triton import mx_ops

    k, n = case
    _, _, w, prep = _layer(n, k)
    x = _x(m, k)
    bias = torch.randn(n, dtype=torch.bfloat16) if m % 2 else None
    y = mx_ops.linear(prep, x.cuda(), None if bias is None else bias.cuda(), act)
    assert y.shape == (m, n) and y.dtype == torch.bfloat16
    r = fp8_linear_ref(x, w) if _served(act, m, n, w=prep.weight) == "fp8" else x.double() @ w.t()
    if bias is not None:
        r = r + bias.double()
    assert rel(y, r) <= BF16_FLOOR


@pytest.mark.parametrize(("r", "k"), [(300, 5120), (7, 96), (1, 8704)])
def test_fp8_quant_matches_the_plugin_rule(r: int, k: int) -> None:
    from paro_kernels.triton import mx_gemm

    x = _x(r, k) * torch.logspace(-3, 3, r).view(r, 1).to(torch.bfloat16)
    x[r // 2] = 0  # an all-zero row gets scale 1 and zero codes
    q, s = mx_gemm.fp8_quant(x.cuda())
    qr, sr = ref.quantize_acts(x, "fp8", "token", k)
    assert torch.equal(s.cpu().double(), sr[:, 0])
    kq = e4m3_decode(q.cpu().view(torch.uint8)).double()
    # Exact RNE of the exact quotient (the kernel breaks fp32's false ties) on the e4m3
    # normals; below 2^-6 a false tie may stay (one step).
    bad = kq != qr
    assert int((bad & (qr.abs() >= 2**-6)).sum()) == 0
    assert ((kq - qr).abs()[bad] <= 2**-9).all()


@pytest.mark.parametrize(("r", "k"), [(300, 5120), (7, 96)])
def test_fp8_quant_from_bits_equals_the_converting_one(
    r: int, k: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # gfx1201's form (`prologue.e4m3_bits`: RNE onto the grid in fp32, the byte from its bits)
    # forced on the H200: the same bytes as the hardware cvt's RNE, subnormal codes included.
    from paro_kernels.triton import mx_gemm, prologue

    cols = torch.logspace(-6, 0, k)[torch.randperm(k, generator=torch.Generator().manual_seed(k))]
    x = (_x(r, k) * torch.logspace(-3, 3, r).view(r, 1) * cols).to(torch.bfloat16).cuda()
    q, s = mx_gemm.fp8_quant(x)
    monkeypatch.setattr(prologue, "e4m3_bits", lambda hip: True)
    qb, sb = mx_gemm.fp8_quant(x)
    mag = q.view(torch.uint8) & 0x7F
    assert bool(((mag > 0) & (mag < 8)).any())
    assert torch.equal(qb.view(torch.uint8), q.view(torch.uint8)) and torch.equal(sb, s)


# (K, partition sizes, G): 2 and 3 rotation runs, boundaries multiples of 16, not of the tile.
PARO_CASES = [(1024, [512, 128, 128], 128), (1536, [208, 144], 64)]


@pytest.mark.parametrize("act", ["fp8", "a16"])
@pytest.mark.parametrize("m", [1, 3, 16, 17, 257])
@pytest.mark.parametrize(("k", "sizes", "g"), PARO_CASES)
def test_paro_merged_matches_fp64_reference(
    k: int, sizes: list[int], g: int, m: int, act: str
) -> None:
    from paro_kernels.triton import mx_gemm, mx_route

    n = sum(sizes)
    weight, scale = mx_layer(n, k, seed=k + n)
    runs = mx_repack.random_runs(k, tuple(sizes), g=g, seed=len(sizes))
    prep = mx_repack.prepare(weight, scale, runs, g, "cuda")
    w = mx.mxfp4_dequantize(weight, scale)
    x = _x(m, k)
    for fused in (True, False) if act == "fp8" else (True,):
        ops = mx_gemm.activations(prep, x.cuda(), act, fused)  # type: ignore[arg-type]
        a, s = ops[0], (ops[1] if len(ops) > 1 else None)
        assert a.shape == (len(sizes), m, k)
        y = mx_gemm.mx_gemm(a, s, prep.weight, prep.bounds, torch.bfloat16)
        assert rel(y, plane_ref(a, s, w, prep.bounds)) <= BF16_FLOOR, fused  # GEMM on its own A
        assert rel(y, paro_ref(x, w, runs, g, act)) <= (1e-2 if act == "fp8" else BF16_FLOOR)
    linear = mx_route.mx_linear(prep, x.cuda(), None, act)  # type: ignore[arg-type]
    served = _served(act, m, n, prep.bounds, True, prep.weight)
    # prefill rows: the rotated W' in bf16 (`mx_dequant`), its floor as the int4 dequant's
    floor = BF16_W_FLOOR if m >= mx_gemm.DEQUANT_MIN_M else BF16_FLOOR
    assert rel(linear, paro_ref(x, w, runs, g, served)) <= (1e-2 if served == "fp8"
                                                           else floor)  # fmt: skip


@pytest.mark.parametrize("m", [1, 300])
def test_exponent_range_of_a_checkpoint_and_beyond(m: int) -> None:
    """Block exponents over 2^-110 .. 2^10 (span 120): bf16 folds, e4m3 takes the per-block
    GEMM (fold_ok false), and both stay at the floor."""
    from paro_kernels.triton import mx_route

    k, n = 1024, 320
    _, _, w, prep = _layer(n, k, e_lo=-110, e_hi=10)
    assert prep.weight.fold_ok(2) and not prep.weight.fold_ok(0)
    x = _x(m, k)
    y16 = mx_route.mx_linear(prep, x.cuda(), None, "a16")
    assert rel(y16, x.double() @ w.t()) <= BF16_FLOOR
    y8 = mx_route.mx_linear(prep, x.cuda(), None, "fp8")
    served = _served("fp8", m, n, w=prep.weight)
    want = fp8_linear_ref(x, w) if served == "fp8" else x.double() @ w.t()
    assert rel(y8, want) <= BF16_FLOOR
    y_gemm = mx_route.mx_linear(prep, x.cuda(), None, "fp8", path="gemm")
    assert rel(y_gemm, fp8_linear_ref(x, w)) <= BF16_FLOOR


@pytest.mark.parametrize("m", [4, 200])
def test_fold_flush_is_detected_and_avoided(m: int) -> None:
    from paro_kernels.triton import mx_gemm

    weight, scale = mx_layer(256, 512, seed=5, e_lo=-3, e_hi=-3)
    scale[:, 1:] = 127 - 3 - 12  # everything x touches is 12 binades under the column max
    prep = mx_repack.prepare(weight, scale, None, 0, "cuda")
    x = _x(m, 512)
    x[:, :32] = 0
    a, s = mx_gemm.activations(prep, x.cuda(), "fp8")
    r = plane_ref(a, s, mx.mxfp4_dequantize(weight, scale), ())
    assert not prep.weight.fold_ok(0)
    assert rel(mx_gemm.mx_gemm(a, s, prep.weight, (), torch.bfloat16), r) <= BF16_FLOOR
    assert rel(mx_gemm.mx_gemm(a, s, prep.weight, (), torch.bfloat16, fold=True), r) >= 0.99


@pytest.mark.parametrize("m", [3, 16, 300])
def test_every_config_of_the_sweep_matches(m: int) -> None:
    from paro_kernels.triton import mx_gemm

    root = str(Path(__file__).resolve().parents[2])  # benchmarks/ is a folder of the checkout
    if root not in sys.path:
        sys.path.insert(0, root)
    from benchmarks.kernels import mx as mx_bench

    k, n = 1024, 1000
    _, _, w, prep = _layer(n, k)
    x = _x(m, k)
    a, s = mx_gemm.activations(prep, x.cuda(), "fp8")
    r = plane_ref(a, s, w, ())
    for cfg in mx_bench._sweep_configs(m):
        for fold in (True, False):
            y = mx_gemm.mx_gemm(a, s, prep.weight, (), torch.bfloat16, None, cfg, fold)
            assert rel(y, r) <= BF16_FLOOR, (cfg, fold)


# The decode GEMV (H200 2026-12-02): K/32 odd (a padded last pair), N ragged against every tile,
# N = 1000 / 5120 at the real K; M = 1..4 (M = 3 pads to the 4-row variant).
GEMV_CASES = [(544, 384), (1024, 320), (5120, 1000), (96, 40)]
# The GEMV's products (bf16 x by an fp16-exact e2m1 code, times a power of two) are exact in
# fp32, so an fp32 output is held to the fp32 sum's rounding; a bf16 one to its own rounding,
# whose Frobenius share over as few as 120 outputs (96 x 40 at M = 3) reached 2.01e-3 (H200).
FP32_SUM = 1e-5
BF16_OUT = 3e-3


@pytest.mark.parametrize("m", [1, 2, 3, 4])
@pytest.mark.parametrize(("k", "n"), GEMV_CASES)
def test_gemv_every_config_and_unpack_matches_fp64(k: int, n: int, m: int) -> None:
    from paro_kernels.triton import mx_gemv

    _, _, w, prep = _layer(n, k)
    x = _x(m, k)
    b = torch.randn(n, dtype=torch.bfloat16)
    r = x.double() @ w.t()
    a = x.cuda().unsqueeze(0)
    for kw in [{}, *mx_gemv.test_configs()]:
        cfg = mx_gemv.gemv_config(m, n, k, (), 132, **kw)
        for asm in (True, False):  # fp32 out: the exact products' fp32 sum, no bf16 rounding
            y = mx_gemv.mx_gemv(a, prep.weight, (), torch.float32, None, cfg, asm)
            assert y.shape == (m, n) and rel(y, r) <= FP32_SUM, (kw, asm)
        yb = mx_gemv.mx_gemv(a, prep.weight, (), torch.bfloat16, b.cuda(), cfg)
        assert yb.dtype == torch.bfloat16 and rel(yb, r + b.double()) <= BF16_OUT, kw


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("pad", [0, 2, 4])
def test_gemv_fp16_and_strided_activations_match_fp64(dtype: torch.dtype, pad: int) -> None:
    # The asm activation loads (8 bytes at columns 4 w, bf16 or fp16 converts) on rows `pad`
    # columns longer than K: pad 2 breaks their 8-byte alignment, so the launcher must fall back
    # to the plain loads; K = 544 has a padded last pair (the clamped high block).
    from paro_kernels.triton import mx_gemv

    k, n = 544, 384
    _, _, w, prep = _layer(n, k)
    for m in (1, 2, 3):
        x = _x(m, k, dtype)
        wide = torch.zeros(1, m, k + pad, dtype=dtype, device="cuda")
        wide[0, :, :k] = x.cuda()
        a = wide[:, :, :k]
        for kw in [{}, *mx_gemv.test_configs()]:
            cfg = mx_gemv.gemv_config(m, n, k, (), 132, **kw)
            y = mx_gemv.mx_gemv(a, prep.weight, (), torch.float32, None, cfg)
            assert rel(y, x.double() @ w.t()) <= FP32_SUM, (m, kw)


def test_gemv_every_e2m1_code_and_sign() -> None:
    # one column per code (0..15, +-0 included) with scale 2^0, x = 1 at one K column only:
    # y is the code's value exactly, through both unpacks and both nibbles of a byte
    from paro_kernels.triton import mx_gemv

    k, n = 128, 32
    codes = torch.arange(n) % 16
    for col in (0, 33, 70, 127):  # low / high nibble, first and second pair
        q = torch.zeros(n, k, dtype=torch.uint8)
        q[:, col] = codes.to(torch.uint8)
        weight = (q[:, 0::2] | (q[:, 1::2] << 4)).contiguous()
        scale = torch.full((n, k // 32), 127, dtype=torch.uint8)
        prep = mx_repack.prepare(weight, scale, None, 0, "cuda")
        x = torch.zeros(1, 1, k, dtype=torch.bfloat16, device="cuda")
        x[0, 0, col] = 1.0
        want = mx.mxfp4_dequantize(weight, scale)[:, col].double()
        for asm in (True, False):
            y = mx_gemv.mx_gemv(x, prep.weight, (), torch.bfloat16, None, None, asm)
            assert torch.equal(y[0].cpu().double(), want), (col, asm)


# The mma GEMV (H200 2026-12-04): fp16 activations (bf16 x paired and cast: exact for these
# magnitudes), exact products, fp32 matrix-unit sums.
MMA_FP32 = 2e-5
MMA_CONFIGS = [{}, {"split_k": 1}, {"split_k": 3}, {"unroll": 1}, {"unroll": 2},
               {"block_n": 64}, {"block_n": 256}]  # fmt: skip


@pytest.mark.parametrize("m", [1, 2, 3, 5, 8, 9, 13, 16, 17, 24, 31, 32, 33, 50, 64])
@pytest.mark.parametrize(("k", "n"), GEMV_CASES)
def test_mma_gemv_every_config_matches_fp64(k: int, n: int, m: int) -> None:
    from paro_kernels.triton import mx_gemv_mma

    _, _, w, prep = _layer(n, k)
    x = _x(m, k)
    b = torch.randn(n, dtype=torch.bfloat16)
    r = x.double() @ w.t()
    a = mx_gemv_mma.pair_fp16(x.cuda())
    for kw in MMA_CONFIGS:
        cfg = mx_gemv_mma.mma_config(m, n, k, (), 132, **kw)
        for _ in range(2):  # twice: the split-K workspace and tickets must be left zeroed
            y = mx_gemv_mma.mx_gemv_mma(a, prep.weight, (), torch.float32, None, cfg)
            assert y.shape == (m, n) and rel(y, r) <= MMA_FP32, (kw, cfg)
        yb = mx_gemv_mma.mx_gemv_mma(a, prep.weight, (), torch.bfloat16, b.cuda(), cfg)
        assert yb.dtype == torch.bfloat16 and rel(yb, r + b.double()) <= BF16_OUT, (kw, cfg)
        for xp in (x, x.half()):  # plain rows (bf16 as served, fp16), paired in the kernel
            y = mx_gemv_mma.mx_gemv_mma(xp.cuda().unsqueeze(0), prep.weight, (),
                                           torch.float32, None, cfg, paired=False)  # fmt: skip
            assert rel(y, r) <= MMA_FP32, (kw, cfg, xp.dtype)


@pytest.mark.parametrize("m", [2, 9, 27, 45])
def test_mma_gemv_planes_and_every_code(m: int) -> None:
    # 3 planes (bounds at multiples of 32, narrower tiles there), each its own activations;
    # then one column per e2m1 code at one K column, scale 2^0: y is the code's value exactly.
    from paro_kernels.triton import mx_gemv_mma

    k, sizes = 1024, (256, 96, 160)
    n = sum(sizes)
    _, _, w, prep = _layer(n, k)
    bounds = (256, 352)
    xs = torch.randn(3, m, k, generator=torch.Generator().manual_seed(m)).to(torch.bfloat16)
    a = torch.cat([mx_gemv_mma.pair_fp16(xs[i].cuda()) for i in range(3)])
    r = plane_ref(xs, None, w, bounds)
    for kw in ({}, {"split_k": 2}):
        cfg = mx_gemv_mma.mma_config(m, n, k, bounds, 132, **kw)
        y = mx_gemv_mma.mx_gemv_mma(a, prep.weight, bounds, torch.float32, None, cfg)
        assert rel(y, r) <= MMA_FP32, (kw, cfg)
    kc, nc = 128, 32
    codes = torch.arange(nc) % 16
    for col in (0, 33, 70, 127):
        q = torch.zeros(nc, kc, dtype=torch.uint8)
        q[:, col] = codes.to(torch.uint8)
        weight = (q[:, 0::2] | (q[:, 1::2] << 4)).contiguous()
        scale = torch.full((nc, kc // 32), 127, dtype=torch.uint8)
        p1 = mx_repack.prepare(weight, scale, None, 0, "cuda")
        x = torch.zeros(m, kc, dtype=torch.bfloat16, device="cuda")
        x[:, col] = 1.0
        want = mx.mxfp4_dequantize(weight, scale)[:, col].double()
        y = mx_gemv_mma.mx_gemv_mma(mx_gemv_mma.pair_fp16(x), p1.weight, (),
                                       torch.bfloat16)  # fmt: skip
        assert torch.equal(y.cpu().double(), want.expand(m, nc)), col


def test_mma_gemv_served_route() -> None:
    # mx_linear serves M in [MMA_MIN_M, MMA_MAX_M] on the mma GEMV (NVFP4 -> MXFP4 and
    # MXFP4-PARO), equal to the forced path; M = 33 elsewhere (the chunks).
    from paro_kernels.triton import mx_gemv_mma, mx_route

    weight, scale = mx_layer(192, 256, seed=9)
    runs = mx_repack.random_runs(256, (128, 64))
    for prep in (mx_repack.prepare(weight, scale, None, 0, "cuda"),
                 mx_repack.prepare(weight, scale, runs, 128, "cuda")):  # fmt: skip
        for m in (1, 2, 16, 17, 32, 33):
            x = torch.randn(m, 256, device="cuda", dtype=torch.bfloat16)
            on = mx_gemv_mma.mma_ok(m, 192, prep.bounds, False)
            assert on == (mx_gemv_mma.MMA_MIN_M <= m <= mx_gemv_mma.MMA_MAX_M), m
            y = mx_route.mx_linear(prep, x, None, "fp8")
            if on:
                torch.testing.assert_close(y, mx_route.mx_linear(prep, x, None, "fp8", "mma"))


def test_mma_gemv_four_tiles_forced() -> None:
    # H100 2026-12-05: the mma GEMV's four tiles (M = 17..32) forced through mx_linear, its
    # prologues included (MXFP4-PARO: the sliced blocks or the Givens records at 32 rows), against
    # fp64 (plain) and against the 16-row chunks (rotated: the same fp16 operands, rows apart).
    from paro_kernels.triton import mx_route

    weight, scale = mx_layer(192, 256, seed=9)
    w = mx.mxfp4_dequantize(weight, scale).double()
    runs = mx_repack.random_runs(256, (128, 64))
    plain = mx_repack.prepare(weight, scale, None, 0, "cuda")
    paro = mx_repack.prepare(weight, scale, runs, 128, "cuda")
    for m in (17, 24, 32):
        x = torch.randn(m, 256, device="cuda", dtype=torch.bfloat16)
        y = mx_route.mx_linear(plain, x, None, "fp8", "mma")
        assert y.shape == (m, 192) and rel(y, x.cpu().double() @ w.t()) <= BF16_OUT, m
        yr = mx_route.mx_linear(paro, x, None, "fp8", "mma")
        yc = mx_route.mx_linear(paro, x, None, "fp8", "chunks")
        assert rel(yr, yc.cpu().double()) <= BF16_OUT, m


@pytest.mark.parametrize("one_launch", [False, True])
def test_mma_gemv_chunks_match_fp64(monkeypatch: pytest.MonkeyPatch, one_launch: bool) -> None:
    # M = 33..64 on the mma GEMV's 32-row chunks, a call each or one launch
    # (`mx_gemv_mma.CHUNKS_ONE_LAUNCH`): plain against fp64, MXFP4-PARO (3 planes' bounds)
    # against its chunks a call each (the same fp16 operands).
    from paro_kernels.triton import mx_gemv_mma, mx_route

    weight, scale = mx_layer(192, 256, seed=9)
    w = mx.mxfp4_dequantize(weight, scale).double()
    runs = mx_repack.random_runs(256, (128, 64))
    plain = mx_repack.prepare(weight, scale, None, 0, "cuda")
    paro = mx_repack.prepare(weight, scale, runs, 128, "cuda")
    for m in (33, 48, 64):
        x = torch.randn(m, 256, device="cuda", dtype=torch.bfloat16)
        monkeypatch.setattr(mx_gemv_mma, "CHUNKS_ONE_LAUNCH", one_launch)
        y = mx_route.mx_linear(plain, x, None, "fp8", "chunks")
        assert y.shape == (m, 192) and rel(y, x.cpu().double() @ w.t()) <= BF16_OUT, m
        yr = mx_route.mx_linear(paro, x, None, "fp8", "chunks")
        monkeypatch.setattr(mx_gemv_mma, "CHUNKS_ONE_LAUNCH", False)
        yc = mx_route.mx_linear(paro, x, None, "fp8", "chunks")
        assert rel(yr, yc.cpu().double()) <= BF16_OUT, m


def test_fp16_activations_and_rows_are_independent() -> None:
    from paro_kernels.triton import mx_route

    _, _, w, prep = _layer(320, 1024)
    x = _x(9, 1024, torch.float16)
    y = mx_route.mx_linear(prep, x.cuda(), None, "a16")
    assert y.dtype == torch.float16 and rel(y, x.double() @ w.t()) <= 1e-3
    torch.testing.assert_close(mx_route.mx_linear(prep, x[:3].cuda(), None, "a16"), y[:3])


@pytest.mark.parametrize("m", [4, 300])
@pytest.mark.parametrize("act", ["fp8", "a16"])
def test_custom_op_compiles_and_graphs(act: str, m: int) -> None:
    from paro_kernels.triton import mx_ops

    weight, scale = mx_layer(192, 256, seed=9)
    prep = mx_repack.prepare(weight, scale, mx_repack.random_runs(256, (128, 64)), 128, "cuda")
    x = torch.randn(m, 256, device="cuda", dtype=torch.bfloat16)  # 300: the dequant path
    eager = mx_ops.linear(prep, x, None, act)
    compiled = torch.compile(lambda t: mx_ops.linear(prep, t, None, act), fullgraph=True)(x)
    torch.testing.assert_close(compiled, eager)  # split-K atomics: order may vary
    graph, static_x = torch.cuda.CUDAGraph(), x.clone()
    mx_ops.linear(prep, static_x, None, act)
    with torch.cuda.graph(graph):
        static_y = mx_ops.linear(prep, static_x, None, act)
    static_x.copy_(torch.randn_like(x))
    graph.replay()
    torch.testing.assert_close(static_y, mx_ops.linear(prep, static_x, None, act))


# The prefill dequant (H200 2026-12-04): (K, partition sizes, G; G 0 = NVFP4 -> MXFP4, unrotated)
# with K/32 odd (544), N ragged, 2-3 planes off the tile, G = 64 and 128.
DEQUANT_CASES = [(544, [1000], 0), (5120, [384], 0), *PARO_CASES, (2048, [2560, 2560], 128)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("k", "sizes", "g"), DEQUANT_CASES)
def test_dequant_matches_fp64(k: int, sizes: list[int], g: int, dtype: torch.dtype) -> None:
    # W'^T [N, K] against fp64: unrotated the checkpoint's values exactly; rotated (W'_g = B_g
    # W_g, B_g in fp16) within the output dtype's rounding (bf16: the W' floor; fp16 1e-3).
    # At every launch config the host can pick (programs walking 1 or several column blocks,
    # narrow tiles), then the layer as served at M = 257 / 300 (the vendor GEMM on it).
    from paro_kernels.triton import mx_gemm, mx_route

    n = sum(sizes)
    weight, scale = mx_layer(n, k, seed=k + n)
    runs = mx_repack.random_runs(k, tuple(sizes), g=g, krot=4, seed=n) if g else None
    prep = mx_repack.prepare(weight, scale, runs, g, "cuda", dtype)
    w = mx.mxfp4_dequantize(weight, scale)
    want = paro_ref(torch.eye(k, dtype=torch.float64), w, runs, g, "a16").t() if g else w
    floor = (BF16_W_FLOOR if dtype == torch.bfloat16 else 1e-3) if g else 0.0
    # H200 2026-12-04: the rotated form with the block scales folded (one dot chain a group)
    for bn, pps, fold in ((0, 0, False), (16, 1, False), (32, 64, False), (0, 0, True),
                          (16, 1, True)):  # fmt: skip
        out = torch.full((n, k), float("nan"), device="cuda", dtype=dtype)
        wt = mx_gemm.mx_dequant(prep, dtype, out, bn, pps, fold=fold)
        assert wt.data_ptr() == out.data_ptr() and rel(wt, want) <= floor, (bn, pps, fold)
    for m in (257, 300):
        x = _x(m, k, dtype)
        bias = torch.randn(n).to(dtype)
        y = mx_route.mx_linear(prep, x.cuda(), bias.cuda(), "fp8")
        served = _served("fp8", m, n, prep.bounds, bool(g), prep.weight, dtype)
        plane = mx_gemm.narrowest_plane(n, prep.bounds) if g else 0
        w8 = mx_gemm.w8_ok(m, "fp8", False, dtype, prep.weight, plane)  # the 8-bit route
        assert y.dtype == dtype and served == ("fp8" if w8 else "a16")
        if w8:
            r = paro_ref(x, w, runs, g, "fp8") if g else fp8_linear_ref(x, w)
            assert rel(y, r + bias.double()) <= (1e-2 if g else BF16_FLOOR), m
        else:
            r = (paro_ref(x, w, runs, g, "a16") if g else x.double() @ w.t()) + bias.double()
            assert rel(y, r) <= max(floor, BF16_FLOOR if dtype == torch.bfloat16 else 1e-3), m
        forced = mx_route.mx_linear(prep, x.cuda(), bias.cuda(), "fp8", "w8" if w8 else "dequant")
        torch.testing.assert_close(y, forced, rtol=0, atol=0)


# The 8-bit route's cases: the 8-bit GEMM takes N % 16 == 0 (a ragged N stays on the dequant).
W8_CASES = [(544, [1008], 0), (5120, [384], 0), *PARO_CASES, (2048, [2560, 2560], 128)]


@pytest.mark.parametrize(("k", "sizes", "g"), W8_CASES)
def test_w8_route_matches_fp64(k: int, sizes: list[int], g: int) -> None:
    # The 2026-12-04 W4A8 prefill on the 8-bit vendor GEMM: the unrotated e4m3 codes x
    # column scales are the checkpoint's values exactly; the layer (per-token e4m3 of the
    # rotated activations, rowwise `_scaled_mm` per plane, bias) against the format's fp64 W4A8
    # reference (the plugin's quantizer rule) at the MXFP4 GEMM's bounds, and against that GEMM's
    # fp8 mode on the same operands; graph capture replays it.
    from paro_kernels.formats import e4m3_decode
    from paro_kernels.triton import mx_gemm, mx_route

    n = sum(sizes)
    weight, scale = mx_layer(n, k, seed=k + n)
    runs = mx_repack.random_runs(k, tuple(sizes), g=g, krot=4, seed=n) if g else None
    prep = mx_repack.prepare(weight, scale, runs, g, "cuda")
    w = mx.mxfp4_dequantize(weight, scale)
    codes, sw = mx_gemm.dequant8(prep)
    wd = e4m3_decode(codes.cpu().view(torch.uint8)).double() * sw.cpu().double()[:, None]
    assert codes.shape == (n, k) and torch.equal(wd, w.double())
    for m in (257, 300):
        x = _x(m, k)
        bias = torch.randn(n).to(torch.bfloat16)
        y = mx_route.mx_linear(prep, x.cuda(), bias.cuda(), "fp8", "w8")
        assert y.shape == (m, n) and y.dtype == torch.bfloat16
        r = (paro_ref(x, w, runs, g, "fp8") if g else fp8_linear_ref(x, w)) + bias.double()
        assert rel(y, r) <= (1e-2 if g else BF16_FLOOR), m
        y_gemm = mx_route.mx_linear(prep, x.cuda(), bias.cuda(), "fp8", "gemm")
        assert rel(y, y_gemm.cpu().double()) <= 2 * BF16_FLOOR, (
            m
        )  # two bf16 roundings of one product
    ragged = mx_repack.prepare(*mx_layer(1000, k, seed=k), None, 0, "cuda")
    assert mx_gemm.w8_ok(4096, "fp8", False, w=prep.weight) == mx_gemm.W8
    assert not mx_gemm.w8_ok(4096, "fp8", False, w=ragged.weight)
    graph, static_x = torch.cuda.CUDAGraph(), x.cuda()
    with torch.cuda.graph(graph):
        static_y = mx_route.mx_linear(prep, static_x, None, "fp8", "w8")
    static_x.copy_(torch.randn_like(static_x))
    graph.replay()
    torch.testing.assert_close(static_y, mx_route.mx_linear(prep, static_x, None, "fp8", "w8"))


def test_plugin_backend_prepare_apply() -> None:
    plugin = Path(__file__).resolve().parents[2] / "plugin"
    if str(plugin) not in sys.path:
        sys.path.insert(0, str(plugin))
    from paro_vllm import mx_triton_backend as be

    weight, scale = mx_layer(320, 1024, seed=11)
    w = mx.mxfp4_dequantize(weight, scale)
    assert be.supported("int8", [320], 0) is not None
    assert be.supported("fp8", [200, 120], 2) is not None  # boundary 200 % 16 != 0
    assert be.supported("fp8", [200, 120], 0) is None  # no rotation: one plane, any boundary
    prep = be.prepare(weight.cuda(), scale.cuda())
    x = _x(5, 1024)
    want = fp8_linear_ref(x, w) if _served("fp8", 5, 320) == "fp8" else x.double() @ w.t()
    assert rel(be.apply(prep, x.cuda(), None, "fp8"), want) <= BF16_FLOOR
    from paro_kernels.triton import mx_gemv_mma

    m = mx_gemv_mma.MMA_CHUNK_MAX_M + 1  # past the decode band and its chunks: e4m3 rows
    x = _x(m, 1024)
    assert _served("fp8", m, 320) == "fp8"
    assert rel(be.apply(prep, x.cuda(), None, "fp8"), fp8_linear_ref(x, w)) <= BF16_FLOOR
    assert rel(be.apply(prep, x.cuda(), None, "bf16"), x.double() @ w.t()) <= BF16_FLOOR
