"""The W4A8 / W5A8 Triton linear on the GPU against fp64 references (marked gpu: never in CI).

Three checks per case, because act quantization turns tiny differences into code flips:
- prologue: codes equal the fp64 rules applied to the fp64 rotation, except at rounding ties
  (the kernel rotates in fp32 from hi + lo blocks: <= 0.2% of codes, each one grid step away);
- GEMM: the output equals exact arithmetic on the kernel's own codes and scales at the bf16
  output floor (fp32 accumulation, bf16 rounding: 2e-3);
- end to end vs the fully independent fp64 reference: well under the quantization noise itself.
"""

from __future__ import annotations

import functools

import pytest
import torch
from _triton_cases import (
    BF16_W_FLOOR,
    W8_TOL,
    assert_scratch_zeroed,
    bias,
    exact_gemm,
    hi_planes,
    merged_layer_bits,
    packed,
    reference,
    reference_a8,
    rel,
    runs,
)
from paro_kernels import reference as ref

pytestmark = pytest.mark.gpu

# (K, partition sizes, G): tile-boundary and odd N, 1-3 partitions; int5 needs N % 32 == 0.
CASES = [
    (128, [288], 128),
    (640, [992], 64),
    (1536, [224, 128], 64),
    (1024, [512, 128, 128], 128),
    (2304, [2048, 256], 128),
]
MODES = [  # (format, scale, zp epilogue)
    ("fp8", "group", False),
    ("fp8", "token", False),
    ("int8", "group", False),
    ("int8", "group", True),
    ("fp8", "token", True),
    ("int8", "token", False),
]
# Every (mode, bits) pair over the cases, at decode (1, 5, 16), the decode edge (17), the split-K
# band (64, 65) and prefill tiles (129, 300): a full product would cost minutes of device time.
_MS = [1, 16, 65, 300, 5, 17, 129, 64]
COMBOS = [
    (*CASES[i % len(CASES)], _MS[i % len(_MS)], *MODES[i % len(MODES)], 4 + (i // 6) % 2)
    for i in range(40)
]


@functools.cache
def _prep_cached(k: int, sizes: tuple[int, ...], g: int, bits: int):  # type: ignore[no-untyped-def]
    from paro_kernels.triton import repack

    parts = merged_layer_bits(k, list(sizes), g, bits, seed=k + len(sizes) + bits)
    prep = repack.prepare(
        *packed(parts), runs(parts), g, dtype=torch.bfloat16, device="cuda", bits=bits,
        **hi_planes(parts),
    )  # fmt: skip
    return parts, prep


def _prep(k: int, sizes: list[int], g: int, bits: int):  # type: ignore[no-untyped-def]
    return _prep_cached(k, tuple(sizes), g, bits)


@pytest.mark.parametrize(("k", "sizes", "g", "m", "fmt", "scale", "zpe", "bits"), COMBOS)
def test_w4a8_linear_matches_fp64(
    k: int, sizes: list[int], g: int, m: int, fmt: str, scale: str, zpe: bool, bits: int
) -> None:
    from paro_kernels.triton import dequant, gemm, launch, ops, prologue, route

    parts, prep = _prep(k, sizes, g, bits)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m + k)).to(torch.bfloat16)
    xc, bb = x.cuda(), bias(parts).cuda()  # type: ignore[union-attr]
    q, asc, rs = prologue.rotate_quant(xc, prep.rot_hi, prep.rot_lo, g, fmt, scale)
    # prologue: codes vs the fp64 rules on the fp64 rotation, row sums of its own codes
    for i, p in enumerate(parts):
        xr = ref.rotate(x.double() * p.channel_scales.double()[0], p.pairs, p.theta, g)
        qr, ar = ref.quantize_acts(xr, fmt, scale, g)
        qi = q[i].cpu().double()
        assert (qi != qr).double().mean().item() <= 2e-3
        assert torch.allclose(asc[i].cpu().double(), ar, rtol=1e-4, atol=0)
        assert torch.equal(rs[i].cpu().double(), qi.view(m, k // g, g).sum(-1)) or fmt == "fp8"
        assert rel(rs[i], qi.view(m, k // g, g).sum(-1)) <= 1e-6
    # GEMM: exact arithmetic on the kernel's own codes, at the bf16 output floor
    y = gemm.w4a8_gemm(
        q, asc, rs, prep, torch.bfloat16, bb, token=scale == "token", zp_epilogue=zpe
    )
    assert y.shape == (m, sum(sizes)) and y.dtype == torch.bfloat16
    assert rel(y, exact_gemm(q, asc, parts, g, bits)) <= 2e-3
    # end to end through the custom op vs the independent fp64 reference
    y2 = ops.linear_a8(prep, xc, bb, fmt, scale, zpe)
    served = route.a8_route(m, g, bits == 5, launch.is_hip(), fmt, prep.bounds)
    if served == "w8":  # the 8-bit vendor GEMM (prefill): per-token acts, per-channel W'
        assert rel(y2, reference_a8(x, parts, g, bits, fmt, scale)) <= W8_TOL[dequant.W8_KIND]
        return
    if served is not None:
        # the band where the 16-bit-activation path serves the layer: the W4A16 reference
        tol = BF16_W_FLOOR if served == "dequant" else 2e-3
        assert rel(y2, _a16_reference(x, parts, g, bits)) <= tol
        return
    r = reference_a8(x, parts, g, bits, fmt, scale)
    noise = rel(r, reference(x, parts, g) if bits == 4 else r)  # act-quant noise (int4 only)
    assert rel(y2, r) <= 5e-3 and (bits == 5 or rel(y2, r) <= 0.3 * noise)


@pytest.mark.parametrize("bits", [4, 5])
@pytest.mark.parametrize("m", [1, 300])
def test_e4m3_from_bits_equals_the_converting_gemm(
    m: int, bits: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # gfx1201's fp8 GEMM form (`prologue.e4m3_bits`: the weights' e4m3 built from bits) forced on
    # the H200: the same e4m3 values, so the same output bit for bit as the converting form, and
    # the fp64 bound of the test above. M = 300: NVIDIA's fp8 dot (below 64 rows it upcasts).
    from paro_kernels.triton import gemm, prologue

    parts, prep = _prep(1024, [256, 128], 128, bits)
    x = torch.randn(m, 1024, generator=torch.Generator().manual_seed(m)).to(torch.bfloat16).cuda()
    q, asc, rs = prologue.rotate_quant(x, prep.rot_hi, prep.rot_lo, 128, "fp8", "group")
    bb = bias(parts)  # exact_gemm adds the layer's bias (the int5 layers have one)
    args = (q, asc, rs, prep, torch.bfloat16, None if bb is None else bb.cuda())
    y = gemm.w4a8_gemm(*args)
    monkeypatch.setattr(prologue, "e4m3_bits", lambda hip: True)
    y_bits = gemm.w4a8_gemm(*args)
    assert torch.equal(y_bits, y)
    assert rel(y_bits, exact_gemm(q, asc, parts, 128, bits)) <= 2e-3


@pytest.mark.parametrize("scale", ["group", "token"])
@pytest.mark.parametrize("m", [1, 300])
def test_e4m3_from_grid_equals_the_converting_prologue(
    m: int, scale: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # gfx1201's fp8 prologue (`prologue.e4m3_bits`: the codes' bytes built from their rounded values'
    # bits, `_e4m3_from_grid`) forced on the H200: the same bytes as the hardware cvt, the same
    # scales and code sums. x's groups span 6 decades a row: with one scale a row, the small
    # groups' codes are e4m3 subnormals (a group's scale keeps its codes near its own amax).
    from paro_kernels.triton import prologue

    _, prep = _prep(1024, [256, 128], 128, 4)
    x = torch.randn(m, 1024, generator=torch.Generator().manual_seed(m))
    x = (x * torch.logspace(-6, 0, 1024)).to(torch.bfloat16).cuda()
    args = (x, prep.rot_hi, prep.rot_lo, 128, "fp8", scale)
    q, asc, rs = prologue.rotate_quant(*args)
    monkeypatch.setattr(prologue, "e4m3_bits", lambda hip: True)
    qb, ascb, rsb = prologue.rotate_quant(*args)
    mag = q.view(torch.uint8) & 0x7F
    assert scale == "group" or bool(((mag > 0) & (mag < 8)).any())
    assert torch.equal(qb.view(torch.uint8), q.view(torch.uint8))
    assert torch.equal(ascb, asc) and torch.equal(rsb, rs)


def _a16_reference(x: torch.Tensor, parts, g: int, bits: int) -> torch.Tensor:  # type: ignore[no-untyped-def]
    if bits == 4:
        return reference(x, parts, g)
    return torch.cat([ref.paro_linear_ref(x, *p.args(), 5, g, p.bias, **p.hi()) for p in parts], 1)


@pytest.mark.parametrize("bits", [4, 5])
@pytest.mark.parametrize("m", [1, 2, 5, 9, 16, 24, 48, 200, 1030])
def test_a16_bands_serve_w4a8(m: int, bits: int) -> None:
    # NVIDIA: the decode GEMVs (int4: the HFMA2 one at M = 1, the mma.sync one at M = 2..16;
    # int5: the mma.sync one from route.MMA_GEMV5_MIN_M, below it the HFMA2 one) and, fp8
    # calls from W8_MIN_M (129) the 8-bit vendor GEMM, int8 calls from DEQUANT_MIN_M (256)
    # dequant + cuBLAS (int4, int5)
    # serve W4A8 in their bands (the 16-bit ones at the bf16 floor of the unquantized-activation
    # linear); elsewhere the A8 kernels.
    from paro_kernels.triton import dequant, gemv_fma, launch, route

    k, sizes, g = 1024, [512, 128, 128], 128
    parts, prep = _prep(k, sizes, g, bits)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.bfloat16)
    bb = bias(parts).cuda()  # type: ignore[union-attr]
    for fmt in ("int8", "fp8"):
        served = route.a8_route(m, g, bits == 5, launch.is_hip(), fmt, prep.bounds)
        w8 = fmt in route.W8_FORMATS and m >= route.W8_MIN_M
        big = "w8" if w8 else "dequant" if m >= route.DEQUANT_MIN_M else None
        small = "gemv" if m <= route.GEMV_MAX_M and bits == 4 else "gemv3"  # int5: gemv3
        if bits == 5 and route.INT5_H2 and m <= gemv_fma.H2_MAX_M:
            small = "gemv-h2"  # int5 decode at M <= 2: the HFMA2 GEMV (H200 2026-12-04)
        if route.mma_gemv_ok(launch.is_hip(), m, g, prep.bounds, bits):
            small = "gemv-mma"  # decode on the mma GEMV (int4 from M = 2, int5 from its min)
        # the decode GEMVs' band (int4 and int5 to 64 rows)
        decode = m <= (route.MMA_GEMV5_MAX_M if bits == 5 else route.MMA_GEMV_MAX_M)
        assert served == (None if launch.is_hip() else small if decode else big), fmt
        y = route.linear_a8(prep, x.cuda(), bb, fmt, "group", bits == 5)
        if served == "w8":
            want = reference_a8(x, parts, g, bits, fmt, "group")
        else:
            want = _a16_reference(x, parts, g, bits) if served else reference_a8(x, parts, g, bits,
                                                                                fmt, "group")  # fmt: skip
        tol = {
            "gemv": 2e-3,
            "gemv3": 2e-3,
            "gemv-h2": 2e-3,
            "gemv-mma": 2e-3,
            "dequant": BF16_W_FLOOR,
        }.get(served or "", 5e-3)
        if served == "w8":
            tol = W8_TOL[dequant.W8_KIND]
        assert rel(y, want) <= tol, fmt


@pytest.mark.parametrize("cfg", ["big", "small", "int5"])
@pytest.mark.parametrize("m", [1, 5, 16])
def test_int5_gemv3_configs_match_fp64(cfg: str, m: int) -> None:
    # int5 decode on the matrix-unit GEMV (its PTX unpack ORs the fifth bits into the fp16
    # pairs) at the three shipped configs (the small one loads 2 groups an iteration), 3 partitions
    # (the boundaries 512 and 768 on the tile grid), 5 groups: odd split-K tails; twice, so the
    # second call finds the split-K workspace and tickets zeroed.
    from paro_kernels.triton import gemv_dot

    k, sizes, g = 640, [512, 256, 128], 128
    parts, prep = _prep(k, sizes, g, 5)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.bfloat16)
    big = dict(block_n=gemv_dot.GEMV3_BLOCK_N, num_warps=gemv_dot.GEMV3_WARPS,
               programs_per_sm=gemv_dot.GEMV3_PROGRAMS_PER_SM, gpi=gemv_dot.GEMV3_GPI,
               num_stages=gemv_dot.GEMV3_STAGES)  # fmt: skip
    kw = {"big": big, "small": gemv_dot.GEMV3_SMALL, "int5": gemv_dot.GEMV3_INT5}[cfg]
    c = gemv_dot.gemv3_config(m, sum(sizes), k, g, prep.bounds, 132, **kw)
    bb = bias(parts).cuda()  # type: ignore[union-attr]
    want = _a16_reference(x, parts, g, 5)
    for _ in range(2):
        y = gemv_dot.gemv3_linear(prep, x.cuda(), bb, "", c, None)
        assert y.dtype == torch.bfloat16 and rel(y, want) <= 2e-3, cfg
    assert_scratch_zeroed()


@pytest.mark.parametrize("how", ["slice", "givens"])
@pytest.mark.parametrize("scale", [1.0, 1e3])
@pytest.mark.parametrize("m", [1, 2])
def test_int5_h2_matches_fp64(scale: float, m: int, how: str) -> None:
    # int5 on the HFMA2 GEMV (H200 2026-12-04; its PTX ORs the fifth bits into the fp16 pairs, the
    # prologue writes xr / 128): 3 partitions, 5 groups (odd split-K tails), activations in the
    # thousands too (its fp16 range argument, |c - z| <= 31); twice (workspace left zeroed);
    # with either paired prologue (blocks or the 2026-12-04 records).
    from paro_kernels.triton import gemv_fma

    k, sizes, g = 640, [512, 256, 128], 128
    parts, prep = _prep(k, sizes, g, 5)
    x = (torch.randn(m, k, generator=torch.Generator().manual_seed(m)) * scale).to(torch.bfloat16)
    bb = bias(parts).cuda()  # type: ignore[union-attr]
    want = _a16_reference(x, parts, g, 5)
    for _ in range(2):
        y = gemv_fma.gemv_h2_linear(prep, x.cuda(), bb, prologue=how)
        assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()
        assert rel(y, want) <= 2e-3
    assert_scratch_zeroed()


@pytest.mark.parametrize(("k", "sizes", "g"), CASES)
@pytest.mark.parametrize("m", [1, 2, 3, 5, 8, 9, 16, 17, 32, 40, 64])
@pytest.mark.parametrize("cfg", [{}, {"block_n": 64, "programs_per_sm": 2}])
def test_int5_mma_gemv_matches_fp64(k: int, sizes: list[int], g: int, m: int,
                                    cfg: dict[str, int]) -> None:  # fmt: skip
    # int5 (I8 PG ZPE) on the mma.sync GEMV (H200 2026-12-04: the fifth bits, byte tig of the
    # 4 columns' fifth-bit words, OR-ed into each pair before the zero's subtraction) across
    # the tile-boundary cases (odd N, 1-3 partitions, G = 64 and 128), one, two and four
    # activation tiles and 32-row chunks of four (M = 40, 64; forced where not served), 2- and 4-warp tiles, both paired prologues
    # (records, blocks) at pair shift 0, activations in the thousands at even M; twice (split-K
    # workspace and tickets left zeroed).
    from paro_kernels.triton import gemv_mma

    parts, prep = _prep(k, sizes, g, 5)
    scale = 1e3 if m % 2 == 0 else 1.0
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m + k)) * scale
    x = x.to(torch.bfloat16)
    bb = bias(parts).cuda()  # type: ignore[union-attr]
    c = gemv_mma.mma_config(m, sum(sizes), k, g, prep.bounds, 132, 5, **cfg)
    want = _a16_reference(x, parts, g, 5)
    for prologue in ("givens", "slice") if m <= 32 else ("slice",):  # records: 32 rows at most
        for _ in range(2):
            y = gemv_mma.gemv_mma_linear(prep, x.cuda(), bb, c, prologue)
            assert y.shape == (m, sum(sizes)) and y.dtype == torch.bfloat16
            assert torch.isfinite(y).all()
            assert rel(y, want) <= 2e-3, (prologue, rel(y, want))
    assert_scratch_zeroed()


@pytest.mark.parametrize("kind", ["fp8", "int8"])
@pytest.mark.parametrize("bits", [4, 5])
def test_w8_prefill_kinds(kind: str, bits: int) -> None:
    # both 8-bit vendor GEMMs (the shipped W8_KIND and the other), with and without the bias,
    # against the format's fp64 reference; and the channel maxima against the fp64 W'
    from paro_kernels.triton import dequant

    k, sizes, g = 2304, [2048, 256], 128
    parts, prep = _prep(k, sizes, g, bits)
    x = torch.randn(300, k, generator=torch.Generator().manual_seed(bits)).to(torch.bfloat16)
    for b in (bias(parts), None):
        y = dequant.w8_linear(prep, x.cuda(), None if b is None else b.cuda(), kind)
        r = reference_a8(x, parts, g, bits, "int8" if kind == "int8" else "fp8", "group")
        if b is None:
            r = r - bias(parts).double()  # type: ignore[union-attr]
        e = rel(y, r)
        print(f"w8 {kind} bits={bits} bias={b is not None}: rel {e:.2e}")
        assert y.dtype == torch.bfloat16 and e <= W8_TOL[kind]


@pytest.mark.parametrize("fmt", ["fp8", "int8"])
def test_zero_point_forms_agree(fmt: str) -> None:
    from paro_kernels.triton import route

    _, prep = _prep(2304, [2048, 256], 128, 5)
    x = torch.randn(300, 2304, device="cuda", dtype=torch.bfloat16)
    a = route.linear_a8(prep, x, None, fmt, "group", False)
    b = route.linear_a8(prep, x, None, fmt, "group", True)
    assert rel(a, b.double().cpu()) <= 2e-3


def test_custom_op_compiles_and_graphs() -> None:
    from paro_kernels.triton import ops

    _, prep = _prep(256, [128, 64], 128, 4)
    x = torch.randn(4, 256, device="cuda", dtype=torch.bfloat16)
    for fmt, scale, zpe in (MODES[0], MODES[3]):  # each torch.compile costs ~20 s
        eager = ops.linear_a8(prep, x, None, fmt, scale, zpe)
        fn = torch.compile(lambda t, f=fmt, s=scale, z=zpe: ops.linear_a8(prep, t, None, f, s, z),
                           fullgraph=True)  # fmt: skip
        torch.testing.assert_close(fn(x), eager)
    graph, static_x = torch.cuda.CUDAGraph(), x.clone()
    ops.linear_a8(prep, static_x, None, "int8", "group", True)
    with torch.cuda.graph(graph):
        static_y = ops.linear_a8(prep, static_x, None, "int8", "group", True)
    static_x.copy_(torch.randn_like(x))
    graph.replay()
    torch.testing.assert_close(static_y, ops.linear_a8(prep, static_x, None, "int8", "group", True))


def test_contract_is_checked() -> None:
    from paro_kernels.triton import route

    _, prep = _prep(256, [128], 128, 5)
    x = torch.randn(2, 256, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="act_format"):
        route.linear_a8(prep, x, None, "fp4", "group", False)
    with pytest.raises(ValueError, match=r"prep\.bits"):
        route.linear(prep, x)  # int5 has no W5A16 kernel
