"""CPU checks of the MXFP4 Triton kernels: repack, the interpreter at small shapes, AOT builds.

The interpreter runs the real kernels (TRITON_INTERPRET=1, numpy underneath) against the fp64
reference; the AOT builds compile the GEMM at the configurations the launcher picks for the real
shapes, for gfx1201 (the serving box) and sm_90 (the H200), and read the ISA: fp8 WMMA in the
W4A8 GEMM, f16/bf16 WMMA in the W4A16 one, no spills, no scratch, VGPRs and LDS in limits.
The helpers at the top are shared with test_triton_mx_gpu.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton  # fails the module in CI when triton is missing: that is the point
from _triton_cases import BF16_W_FLOOR
from paro_kernels import reference as ref
from paro_kernels.formats import e4m3_decode, pack_fp4
from paro_kernels.triton import aot, mx_gemm, mx_gemv_mma, mx_ops, mx_repack, mx_route

# --------------------------------------------------------------------------- shared helpers


def mx_layer(
    n: int, k: int, seed: int, e_lo: int = -14, e_hi: int = -3
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random checkpoint tensors: every e2m1 code (incl. -0) and block exponents in [e_lo, e_hi].

    Row 0 gets an all-zero block with the largest e8m0 scale: it must not widen the column's
    exponent span (the fold range) nor contribute anything.
    """
    g = torch.Generator().manual_seed(seed)
    weight = torch.randint(0, 256, (n, k // 2), generator=g, dtype=torch.uint8)
    scale = torch.randint(127 + e_lo, 128 + e_hi, (n, k // 32), generator=g, dtype=torch.uint8)
    weight[0, :16] = 0
    scale[0, 0] = 254
    return weight, scale


def case_layer(k: int, sizes: list[int], seed: int, run_seed: int, rotated: bool, g: int = 64,
               dtype: torch.dtype = torch.float16) -> tuple:  # fmt: skip
    """An interpreter case's layer on the CPU: (N, weight, scale, runs or None, `prepare`d)."""
    n = sum(sizes)
    weight, scale = mx_layer(n, k, seed=seed)
    runs = mx_repack.random_runs(k, tuple(sizes), g=g, krot=4, seed=run_seed) if rotated else None
    return n, weight, scale, runs, mx_repack.prepare(weight, scale, runs, g if rotated else 0, "cpu",
                                                   dtype)  # fmt: skip


def rel(y: torch.Tensor, r: torch.Tensor) -> float:
    """Frobenius relative error against the reference; NaN never passes."""
    e = ((y.cpu().double() - r).norm() / r.norm()).item()
    return e if e == e else float("inf")


def plane_ref(a: torch.Tensor, a_scale: torch.Tensor | None, w: torch.Tensor,
              bounds: tuple[int, ...]) -> torch.Tensor:  # fmt: skip
    """fp64 y [M, N] of the GEMM contract: plane p of A (times its scale) for its columns."""
    ad = a.cpu().double() if a.dtype != torch.float8_e4m3fn else e4m3_decode(
        a.cpu().view(torch.uint8)
    ).double()  # fmt: skip
    if a_scale is not None:
        ad = ad * a_scale.cpu().double().unsqueeze(-1)
    edges = (0, *bounds, w.shape[0])
    return torch.cat([ad[p] @ w[edges[p] : edges[p + 1]].t() for p in range(len(edges) - 1)], 1)


def fp8_linear_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """fp64 NVFP4 -> MXFP4 W4A8 linear: per-token e4m3 of x (the plugin's rule) times W^T."""
    q, s = ref.quantize_acts(x.cpu(), "fp8", "token", x.shape[1])
    return (q * s) @ w.t()


def paro_ref(x: torch.Tensor, w: torch.Tensor, runs: list, g: int, act: str) -> torch.Tensor:
    """fp64 MXFP4-PARO merged linear: each partition rotates x by its own run."""
    outs = []
    for n0, n1, pairs, theta, cs in runs:
        xr = ref.rotate(x.cpu().double() * cs.double()[0], pairs, theta, g)
        if act == "fp8":
            q, s = ref.quantize_acts(xr, "fp8", "token", xr.shape[1])
            xr = q * s
        outs.append(xr @ w[n0:n1].t())
    return torch.cat(outs, 1)


# --------------------------------------------------------------------------- repack


def _unrepack(w: mx_repack.MxWeight) -> tuple[torch.Tensor, torch.Tensor]:
    """Invert `repack` in plain torch: (weight [N, K/2], weight_scale [N, K/32])."""
    n, k = w.n, w.k
    kp = w.qw.shape[1] * 2
    planes = w.qw.view(n, kp // 64, 32)
    codes = torch.stack((planes & 15, planes >> 4), 2).reshape(n, kp)[:, :k].contiguous()
    return pack_fp4(codes), w.sc[: k // 32].t().contiguous()


@pytest.mark.parametrize(("n", "k"), [(40, 96), (3, 64), (17, 544)])
def test_repack_round_trips_and_measures_the_span(n: int, k: int) -> None:
    weight, scale = mx_layer(n, k, seed=n, e_lo=-9, e_hi=-3)
    w = mx_repack.repack(weight, scale)
    assert w.qw.shape == (n, -(-k // 64) * 32) and w.sc.shape == (-(-k // 64) * 2, n)
    back_w, back_s = _unrepack(w)
    assert torch.equal(back_w, weight) and torch.equal(back_s, scale)
    assert (w.sc[k // 32 :] == 0).all()  # padding rows: zero scale, zero codes
    assert w.span <= 6  # the all-zero block at 2^127 is not counted
    assert int(w.cmax[0]) <= 127 - 3
    assert w.fold_ok(0) and w.fold_ok(1) and w.fold_ok(2)


def test_fold_limits_follow_the_operand_range() -> None:
    weight, scale = mx_layer(8, 256, seed=1, e_lo=-3, e_hi=-3)
    scale[3, 5] = 127 - 3 - 12  # one block 12 binades below its column's largest
    w = mx_repack.repack(weight, scale)
    assert w.span == 12
    assert not w.fold_ok(0) and w.fold_ok(1) and w.fold_ok(2)
    scale[3, 5] = 127 - 3 - 14
    assert not mx_repack.repack(weight, scale).fold_ok(1)


def test_contract_errors_name_the_argument() -> None:
    weight, scale = mx_layer(8, 64, seed=2)
    with pytest.raises(ValueError, match=r"weight_scale\.shape"):
        mx_repack.repack(weight, scale[:, :1])
    bad = scale.clone()
    bad[1, 1] = 255
    with pytest.raises(ValueError, match="NaN"):
        mx_repack.repack(weight, bad)
    with pytest.raises(ValueError, match="K"):
        mx_repack.repack(weight[:, :8], scale[:, :1])  # K = 16
    runs = mx_repack.random_runs(128, (24, 8), g=64)
    with pytest.raises(ValueError, match="multiples of 16"):
        mx_repack.prepare(*mx_layer(32, 128, seed=3), runs, 64)


def test_fake_implementations_give_shapes() -> None:

    x = torch.empty(5, 128, device="meta", dtype=torch.bfloat16)
    q, s = mx_ops.mx_fp8_quant(x)
    assert q.shape == (5, 128) and q.dtype == torch.float8_e4m3fn and s.shape == (5,)
    qw = torch.empty(72, 64, device="meta", dtype=torch.uint8)
    sc = torch.empty(4, 72, device="meta", dtype=torch.uint8)
    cm = torch.empty(72, device="meta", dtype=torch.int32)
    y = mx_ops.mx_linear(x, qw, sc, cm, 128, 0, 100, [], None, None, 0, "fp8")
    assert y.shape == (5, 72) and y.dtype == torch.bfloat16
    a = torch.empty(2, 5, 128, device="meta", dtype=torch.float8_e4m3fn)
    y = mx_ops.mx_gemm(a, None, qw, sc, cm, 128, 0, 100, [64], torch.float16)
    assert y.shape == (5, 72) and y.dtype == torch.float16


# --------------------------------------------------------------------------- interpreter

# (name, K, partition sizes, M, act, rotated, fold): odd K/32, N off the tile, decode split-K
# (M <= 16) and the 64-row path, 1-3 planes; fold None = the launcher's choice.
INTERP_CASES = [
    ("a16", 96, [40], 3, "a16", False, None),
    ("a16_perblock_bias", 160, [72], 17, "a16", False, False),
    ("fp8", 96, [40], 1, "fp8", False, None),
    ("fp8_merged_noplanes", 224, [32, 16], 17, "fp8", False, None),
    ("paro_a16", 128, [32, 16, 16], 5, "a16", True, None),
    ("paro_fp8", 128, [32, 16], 17, "fp8", True, None),
]
# (name, K, partition sizes, M, rotated): K/32 odd (544: a padded last pair), 3 planes, M = 1..4.
GEMV_INTERP_CASES = [
    ("one_row", 96, [40], 1, False),
    ("odd_pairs", 544, [48], 2, False),
    ("three_rows", 160, [72], 3, False),
    ("paro_planes", 128, [32, 16, 16], 4, True),
]
# The mma GEMV (H200 2026-12-04; plain ops in the interpreter): (name, K, partition sizes, M,
# rotated) with one and two activation tiles, a padded last pair (544), 2 planes; four tiles
# (H100 2026-12-05: M = 17..32) with the last one partial, plain and rotated.
MMA_INTERP_CASES = [
    ("mma_one_row", 96, [40], 1, False),
    ("mma_odd_pairs", 544, [64], 5, False),
    ("mma_two_tiles", 160, [72], 11, False),
    ("mma_paro_planes", 128, [32, 32], 3, True),
    ("mma_four_tiles", 224, [40], 27, False),
    ("mma_paro_four_tiles", 128, [32, 32], 19, True),
    ("mma_paro_chunks", 128, [32, 32], 35, True),  # two 32-row chunks, the second partial
]
# The prefill dequant (H200 2026-12-04): (name, K, partition sizes, rotated, out dtype) with K/32
# odd (a padded last pair), N off the 128-column tile, 3 planes, planes narrower than the tile.
DEQUANT_INTERP_CASES = [
    ("dq_odd_pairs", 544, [40], False, "bfloat16"),
    ("dq_two_tiles", 160, [200], False, "float16"),
    ("dq_paro_planes", 256, [64, 64, 64], True, "bfloat16"),
    ("dq_paro_ragged", 128, [96, 32], True, "float16"),
    ("dq_paro_g64", 192, [48, 32], True, "bfloat16"),
]
# The W4A8 prefill on the 8-bit vendor GEMM (H200 2026-12-04): (name, K, partition sizes, M,
# rotated, G) with K/32 odd, 1-3 planes, G 64 / 128; fp16 activations (the interpreter's bf16
# rotation prologue is not the GPUs': the GPU test runs bf16).
W8_INTERP_CASES = [
    ("w8_odd_pairs", 544, [48], 7, False, 64),
    ("w8_paro_planes", 256, [64, 32, 32], 5, True, 128),
    ("w8_paro_g64", 192, [48, 32], 3, True, 64),
]
# TRITON_INTERPRET is read when a kernel is decorated, so the interpreter runs in a child process.
_CHILD = """
import json, sys, torch
from test_triton_mx_cpu import GEMV_INTERP_CASES, INTERP_CASES, MMA_INTERP_CASES, mx_layer
from test_triton_mx_cpu import DEQUANT_INTERP_CASES, case_layer, paro_ref, plane_ref, rel
from test_triton_mx_cpu import W8_INTERP_CASES
from paro_kernels import mx

from paro_kernels.formats import e4m3_decode
from paro_kernels import reference as ref
from paro_kernels.triton import launch, mx_gemm, mx_gemv, mx_gemv_mma, mx_repack, mx_route, prologue
out = {}
for name, k, sizes, m, act, rotated, fold in INTERP_CASES:
    n = sum(sizes)
    weight, scale = mx_layer(n, k, seed=k + m)
    runs = mx_repack.random_runs(k, tuple(sizes), g=64, krot=4, seed=m) if rotated else None
    prep = mx_repack.prepare(weight, scale, runs, 64 if rotated else 0, "cpu", torch.float16)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.float16)
    bias = torch.randn(n).to(torch.float16) if "bias" in name else None
    ops = mx_gemm.activations(prep, x, act)
    a, s = ops[0], (ops[1] if len(ops) > 1 else None)
    y = mx_gemm.mx_gemm(a, s, prep.weight, prep.bounds, torch.float16, bias, fold=fold)
    w = mx.mxfp4_dequantize(weight, scale)
    r = plane_ref(a, s, w, prep.bounds) + (0 if bias is None else bias.double())
    res = {"rel": rel(y, r), "shape": list(y.shape), "dtype": str(y.dtype)}
    if act == "fp8" and not rotated:
        qr, sr = ref.quantize_acts(x, "fp8", "token", k)
        kq = e4m3_decode(a[0].view(torch.uint8)).double()
        bad = kq != qr
        res["scale_exact"] = bool(torch.equal(s[0].double(), sr[:, 0]))
        # The interpreter's fp32 -> e4m3 convert misses the carry into the next binade.
        res["bad_not_carry"] = int((bad & ~((qr.abs() == 2 * kq.abs()) & (qr.abs() > 0))).sum())
    out[name] = res
# Fold range: every block 12 binades under the column's largest, whose K range x leaves zero,
# so the whole output comes from blocks an e4m3 fold would flush.
weight, scale = mx_layer(16, 128, seed=5, e_lo=-3, e_hi=-3)
scale[:, 1:] = 127 - 3 - 12
prep = mx_repack.prepare(weight, scale)
x = torch.randn(4, 128, generator=torch.Generator().manual_seed(4)).to(torch.float16)
x[:, :32] = 0
a, s = mx_gemm.activations(prep, x, "fp8")
r = plane_ref(a, s, mx.mxfp4_dequantize(weight, scale), ())
flush = {"fold_ok": prep.weight.fold_ok(0), "span": prep.weight.span}
for key, fold in (("auto", None), ("forced", True)):
    flush[key] = rel(mx_gemm.mx_gemm(a, s, prep.weight, (), torch.float16, fold=fold), r)
out["flush"] = flush
# The decode GEMV (plain-op unpack): fp16 activations, planes, bias, split-K, M = 1..4.
from paro_kernels.triton import launch, mx_gemm, mx_gemv, mx_gemv_mma, mx_repack, mx_route, prologue
gemv = {}
for name, k, sizes, m, rotated in GEMV_INTERP_CASES:
    n, weight, scale, runs, prep = case_layer(k, sizes, k + m, m, rotated)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.float16)
    bias = torch.randn(n).to(torch.float16)
    (a,) = mx_gemm.activations(prep, x, "a16")
    r = plane_ref(a, None, mx.mxfp4_dequantize(weight, scale), prep.bounds) + bias.double()
    for bn, pf in ((16, False), (32, False), (16, True)):  # PF: the next pair's prefetch
        cfg = mx_gemv.gemv_config(m, n, k, prep.bounds, 4, block_n=bn, prefetch=pf)
        y = mx_gemv.mx_gemv(a, prep.weight, prep.bounds, torch.float16, bias, cfg)
        gemv[f"{name}/{bn}/{pf}"] = {"rel": rel(y, r), "shape": list(y.shape),
                                     "split": cfg.split_k, "pf": cfg.prefetch}
    y = mx_route.mx_linear(prep, x, bias, "fp8")  # decode rows: the GEMV, 16-bit activations
    gemv[f"{name}/served"] = {"rel": rel(y, r), "shape": list(y.shape), "split": 0}
out["gemv"] = gemv
# The mma GEMV on paired fp16 (pair_fp16, or the rotated paired prologue at pair shift 0),
# split 1 and 3, bias; the pairing itself against x.
from paro_kernels.triton import launch, mx_gemm, mx_gemv, mx_gemv_mma, mx_repack, mx_route, prologue
mma = {}
for name, k, sizes, m, rotated in MMA_INTERP_CASES:
    n, weight, scale, runs, prep = case_layer(k, sizes, k + m, m, rotated)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.bfloat16)
    bias = torch.randn(n).to(torch.bfloat16)
    if rotated:
        (a16,) = mx_gemm.activations(prep, x, "a16")
        a = prologue.rotate_slices(x.to(torch.float16), prep.rot_hi, prep.rot_lo, 64,
                                    paired=True, pair_shift=0)[0]
    else:
        a16 = x.to(torch.float16).unsqueeze(0)
        a = mx_gemv_mma.pair_fp16(x)
    p = a16.reshape(a16.shape[0], m, k // 8, 2, 4).transpose(3, 4).reshape(a16.shape)
    r = plane_ref(a16, None, mx.mxfp4_dequantize(weight, scale), prep.bounds) + bias.double()
    for split in (1, 3):
        cfg = mx_gemv_mma.mma_config(m, n, k, prep.bounds, 4, split_k=split)
        y = mx_gemv_mma.mx_gemv_mma(a, prep.weight, prep.bounds, torch.float32, bias, cfg)
        mma[f"{name}/{split}"] = {"rel": rel(y, r), "shape": list(y.shape),
                                  "pairing": rel(a.double(), p.double()), "tiles": cfg.block_m}
        if rotated:  # the served prologue: the Givens records at M < 9 (tables built at load)
            gv = mx_route._mma_prologue(prep, x, prep.rot_hi, prep.rot_lo)
            mma[f"{name}/{split}"]["givens"] = rel(gv.double(), p.double())
            mma[f"{name}/{split}"]["gv_shape"] = list(prep.gv_idx.shape)
        if not rotated:  # plain rows, paired in the kernel: bf16 (as served) and fp16
            for xp in (x, x.to(torch.float16)):
                y = mx_gemv_mma.mx_gemv_mma(xp.unsqueeze(0), prep.weight, prep.bounds,
                                               torch.float32, bias, cfg, paired=False)
                mma[f"{name}/{split}/{xp.dtype}"] = {"rel": rel(y, r), "shape": list(y.shape),
                                                     "pairing": 0.0, "tiles": cfg.block_m}
out["mma"] = mma
# The prefill dequant: W'^T against fp64 (the rotated layer's W' is its response to the unit
# vectors), and the layer on it (`path="dequant"`; served from DEQUANT_MIN_M rows) against x.
dq = {}
for name, k, sizes, rotated, dt in DEQUANT_INTERP_CASES:
    dtype, g = getattr(torch, dt), 64 if name.endswith("g64") else 128
    n, weight, scale, runs, prep = case_layer(k, sizes, k + sum(sizes), sum(sizes), rotated, g,
                                              dtype)  # fmt: skip
    w = mx.mxfp4_dequantize(weight, scale)
    wt = mx_gemm.mx_dequant(prep, dtype)
    wr = paro_ref(torch.eye(k, dtype=torch.float64), w, runs, g, "a16").t() if rotated else w
    m = mx_gemm.DEQUANT_MIN_M if name == "dq_odd_pairs" else 5
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(k)).to(dtype)
    bias = torch.randn(n).to(dtype)
    y = mx_route.mx_linear(prep, x, bias, "fp8", "dequant")
    r = (paro_ref(x, w, runs, g, "a16") if rotated else x.double() @ w.t()) + bias.double()
    served = mx_route.mx_linear(prep, x, bias, "fp8")
    dq[name] = {"w_rel": rel(wt, wr), "w_shape": list(wt.shape), "w_dtype": str(wt.dtype),
                "rel": rel(y, r), "shape": list(y.shape), "dtype": str(y.dtype),
                "served_same": bool(torch.equal(served, y)), "m": m}
    if rotated:  # the block scales folded into one dot chain (DEQUANT_FOLD), both ways forced
        wb = mx_gemm.mx_dequant(prep, dtype, fold=False).clone()
        wf = mx_gemm.mx_dequant(prep, dtype, fold=True)
        dq[name].update(fold_rel=rel(wf, wr), fold_vs_block=rel(wf, wb.double()),
                        fold_ok=prep.weight.fold_ok(1))  # fmt: skip
# A rotated layer 14 binades wide: past the fp16 fold, so auto takes the per-block form (exact)
# and a forced fold is refused by name.
weight, scale = mx_layer(64, 128, seed=6, e_lo=-3, e_hi=-3)
scale[:, 1:] = 127 - 3 - 14
runs = mx_repack.random_runs(128, (64,), g=128, krot=4, seed=6)
prep = mx_repack.prepare(weight, scale, runs, 128, "cpu", torch.float16)
wr = paro_ref(torch.eye(128, dtype=torch.float64), mx.mxfp4_dequantize(weight, scale), runs, 128,
              "a16").t()  # fmt: skip
wide = {"span": prep.weight.span, "auto": rel(mx_gemm.mx_dequant(prep, torch.float16), wr)}
try:
    mx_gemm.mx_dequant(prep, torch.float16, fold=True)
    wide["refused"] = ""
except ValueError as err:
    wide["refused"] = str(err)
dq["wide"] = wide
out["dequant"] = dq
# The 8-bit vendor GEMM route: the codes x scales against the checkpoint's values, the layer
# against the fp64 product of its own operands (the interpreter's fp32 -> e4m3 convert is not
# the GPUs', so the format's own reference is the GPU test's), and the MXFP4 GEMM's fp8 mode.
from paro_kernels.formats import e4m3_decode
w8 = {}
for name, k, sizes, m, rotated, g in W8_INTERP_CASES:
    n, weight, scale, runs, prep = case_layer(k, sizes, k + m, m, rotated, g)
    w = mx.mxfp4_dequantize(weight, scale)
    codes, sw = mx_gemm.dequant8(prep)
    wd = e4m3_decode(codes.view(torch.uint8)).double() * sw.double()[:, None]
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(k)).to(torch.float16)
    bias = torch.randn(n).to(torch.float16)
    y = mx_route.mx_linear(prep, x, bias, "fp8", "w8")
    a, s = mx_gemm.activations(prep, x, "fp8")
    yg = mx_gemm.mx_gemm(a, s, prep.weight, prep.bounds, torch.float16, bias)
    r = plane_ref(a, s, w, prep.bounds) + bias.double()
    w8[name] = {"exact": bool(torch.equal(wd, w.double())), "codes": str(codes.dtype),
                "shape": list(y.shape), "dtype": str(y.dtype), "rel": rel(y, r),
                "vs_gemm": rel(y, yg.double()), "gemm_rel": rel(yg, r),
                "floor": rel(r.to(torch.bfloat16), r)}  # the bf16 output's own rounding
# A layer past the e4m3 fold (one block 12 binades down): refused by name, not flushed.
weight, scale = mx_layer(16, 128, seed=5, e_lo=-3, e_hi=-3)
scale[:, 1:] = 127 - 3 - 12
try:
    mx_gemm.dequant8(mx_repack.prepare(weight, scale))
    w8["refused"] = ""
except ValueError as err:
    w8["refused"] = str(err)
out["w8"] = w8
# reserve_scratch at load: the prefill routes' scratch at its size for the layer, so that the
# routes' own requests (the dequant path's W', the 8-bit route's codes and scales) grow nothing
# later (a CUDA graph keeps the old buffer's address); only the routes the layer can take.
reserve = {}
for name, rotated, dt in (("plain", False, "bfloat16"), ("paro", True, "bfloat16"),
                          ("plain_fp16", False, "float16")):  # fmt: skip
    launch._WS.clear()
    dtype = getattr(torch, dt)
    n, weight, scale, runs, prep = case_layer(256, [256, 128], 7, 7, rotated, 128, dtype)
    mx_gemm.reserve_scratch(prep, dtype)
    held = dict(launch._WS)
    mx_gemm.mx_dequant(prep, dtype)
    mx_gemm.dequant8(prep)
    reserve[name] = {"kinds": sorted(key[0] for key in held),
                     "kept": all(launch._WS[key] is buf for key, buf in held.items()),
                     "sizes": {key[0]: buf.numel() for key, buf in held.items()}, "nk": n * 256}
out["reserve"] = reserve
from paro_kernels.triton import launch, mx_gemm, mx_gemv, mx_gemv_mma, mx_repack, mx_route, prologue
chunks = {}
mx_gemv_mma.CHUNKS_ONE_LAUNCH = False  # a call a chunk (one launch: MMA_INTERP_CASES' chunks)
for name, rotated in (("plain", False), ("paro", True)):
    n, weight, scale, runs, prep = case_layer(256, [64, 32, 32], 9, 9, rotated, 128)
    w = mx.mxfp4_dequantize(weight, scale)
    step = mx_gemv_mma.MMA_MAX_M
    x = torch.randn(step + 3, 256, generator=torch.Generator().manual_seed(19)).to(torch.float16)
    bias = torch.randn(n).to(torch.float16)
    y = mx_route.mx_linear(prep, x, bias, "fp8", "chunks")
    parts = [mx_route.mx_linear(prep, x[i : i + step], bias, "fp8") for i in (0, step)]
    acts = [mx_route.served_act(xi.shape[0], "fp8", False, n, prep.bounds, rotated, prep.weight,
                                      x.dtype) for xi in (x[:step], x[step:])]
    refs = []
    for xi, act in zip((x[:step], x[step:]), acts):
        if act == "fp8":  # the GEMM's own e4m3 operands (the interpreter's convert is not a GPU's)
            refs.append(plane_ref(*mx_gemm.activations(prep, xi, "fp8"), w, prep.bounds))
        else:
            refs.append(paro_ref(xi, w, runs, 128, act) if rotated else xi.double() @ w.t())
    r = torch.cat(refs) + bias.double()
    chunks[name] = {"shape": list(y.shape), "acts": acts, "same": bool(torch.equal(y, torch.cat(parts))),
                    "rel": rel(y, r), "rel_tail": rel(y[step:], r[step:]), "step": step}
out["chunks"] = chunks
xs = torch.tensor([[7e4, -7e4, 1.0, -2.0, 3.0, 4.0, 5.0, 6.0]], dtype=torch.bfloat16)
out["pair_sat"] = mx_gemv_mma.pair_fp16(xs)[0, 0].tolist()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def interp_results() -> dict[str, dict]:
    """Run every interpreter case in one child process (one import of the interpreter)."""
    here = Path(__file__).parent
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(here), str(here.parents[1] / "kernels")])
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=False,
        timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", DEQUANT_INTERP_CASES, ids=[c[0] for c in DEQUANT_INTERP_CASES])
def test_interpreter_dequant_matches_fp64(interp_results: dict, case: tuple) -> None:
    # The 2026-12-04 prefill path: W'^T [N, K] in the activations' dtype. Unrotated it is
    # the checkpoint's values exactly (e2m1 x 2^(e - 127): exact in bf16, and in fp16 for the
    # 2^-14 .. 2^-3 scales here); rotated (MXFP4-PARO) W'_g = B_g W_g within the output
    # dtype's rounding (B_g in fp16: 11 bits), twice the bf16 floor here: the interpreter's
    # fp32 -> bf16 cast truncates (the GPUs round to nearest: the GPU test holds the floor).
    # The layer on it (the vendor GEMM on x itself, 16-bit activations) holds the same bound;
    # at DEQUANT_MIN_M rows the served route is it.
    name, k, sizes, rotated, dt = case
    res = interp_results["dequant"][name]
    n = sum(sizes)
    assert res["w_shape"] == [n, k] and res["w_dtype"] == f"torch.{dt}", res
    floor = 2 * BF16_W_FLOOR if dt == "bfloat16" else 1e-3
    assert res["w_rel"] <= (floor if rotated else 0.0), res
    assert res["shape"] == [res["m"], n] and res["dtype"] == f"torch.{dt}", res
    assert res["rel"] <= floor, res
    assert res["served_same"] == (res["m"] >= mx_gemm.DEQUANT_MIN_M), res


ROT_DEQUANT_CASES = [c for c in DEQUANT_INTERP_CASES if c[3]]


@pytest.mark.parametrize("case", ROT_DEQUANT_CASES, ids=[c[0] for c in ROT_DEQUANT_CASES])
def test_interpreter_dequant_fold_matches_fp64(interp_results: dict, case: tuple) -> None:
    # The 2026-12-04 rotated dequant with the block scales folded into the values (one dot
    # chain a group): the same bound as the per-block form, and the same W' to within the output
    # rounding (the products are the same, exactly scaled: only the fp32 sums may differ).
    name, _, _, rotated, dt = case
    res = interp_results["dequant"][name]
    assert rotated and res["fold_ok"], res
    floor = 2 * BF16_W_FLOOR if dt == "bfloat16" else 1e-3
    assert res["fold_rel"] <= floor, res
    assert res["fold_vs_block"] <= (2**-8 if dt == "bfloat16" else 2**-11), res


def test_interpreter_dequant_fold_refused_past_fp16(interp_results: dict) -> None:
    res = interp_results["dequant"]["wide"]
    assert res["span"] == 14 and res["auto"] <= 1e-3, res  # the per-block form: fp16 W' floor
    assert res["refused"].startswith("fold: expected False unless every nonzero block"), res


@pytest.mark.parametrize("case", W8_INTERP_CASES, ids=[c[0] for c in W8_INTERP_CASES])
def test_interpreter_w8_route_matches_its_operands(interp_results: dict, case: tuple) -> None:
    # The W4A8 prefill on the 8-bit vendor GEMM: the unrotated codes x column scales are the
    # checkpoint's values exactly (the GEMM's e4m3 fold), and the layer on them (rowwise
    # `_scaled_mm`, bf16 out, cast to the fp16 activations' dtype) is the fp64 product of the
    # fp8 activations and those codes to the bf16 output floor, as the MXFP4 GEMM's fp8 mode is.
    name, _, sizes, m, _, _ = case
    res = interp_results["w8"][name]
    assert res["exact"] and res["codes"] == "torch.float8_e4m3fn", res
    assert res["shape"] == [m, sum(sizes)] and res["dtype"] == "torch.float16", res
    assert 0 < res["floor"] < 3e-3, res
    assert res["rel"] <= 1.5 * res["floor"] and res["gemm_rel"] <= 1e-3, res
    assert res["vs_gemm"] <= 2 * res["floor"], res


def test_w8_scale_vectors_are_16_byte_aligned() -> None:
    # cuBLASLt refuses a rowwise scale vector that is not 16-byte aligned (the H200 GPU suite,
    # H200 2026-12-05: plane 1's slice of the [P, M] token scales at M = 257 starts 1028 bytes in).
    # w8_linear hands it an aligned copy of such a slice, and an aligned one as it is.
    sa = torch.arange(3 * 257, dtype=torch.float32).view(3, 257)
    for p in range(3):
        got = mx_gemm._aligned(sa[p].view(257, 1))
        assert got.data_ptr() % 16 == 0 and torch.equal(got, sa[p].view(257, 1)), p
    assert mx_gemm._aligned(sa[0]).data_ptr() == sa.data_ptr()  # aligned: no copy


def test_interpreter_w8_refuses_a_layer_past_the_fold(interp_results: dict) -> None:
    res = interp_results["w8"]
    assert res["refused"].startswith("weight: expected every nonzero block within 11 binades")
    assert "span 12" in res["refused"], res


def test_interpreter_reserve_scratch_leaves_nothing_to_grow(interp_results: dict) -> None:
    # Each layer reserves, at load, what its prefill routes write: the dequant path's W' always;
    # the 8-bit route's codes and scales only where the layer can take that route (bf16, and for
    # MXFP4-PARO planes of at least 2048 columns, `W8_ROT_PLANES`: not this 256 + 128 one). Running the
    # routes afterwards finds every reserved buffer big enough (the same tensor objects).
    res = interp_results["reserve"]
    assert res["plain"]["kinds"] == ["dequant_w", "w8_fp8", "w8_scale"], res
    assert res["paro"]["kinds"] == res["plain_fp16"]["kinds"] == ["dequant_w"], res
    for name, r in res.items():
        assert r["kept"] and r["sizes"]["dequant_w"] >= r["nk"], (name, r)


def test_w8_route_dispatch_follows_the_measurement() -> None:
    # The H100 measurements in mx_gemm's W8 notes: the 8-bit route serves fp8 bf16 layers on
    # NVIDIA from M = 17 (past the decode GEMVs), rotated ones (MXFP4-PARO) from M = 17 where
    # every plane is at least 4096 wide and from M = 96 where it is at least 2048 (in_proj's
    # 2048-column plane lost to the GEMM at M = 24..64, qkv's 512-column planes to the dequant
    # path at every M).
    from paro_kernels.triton import mx_gemm

    ok = mx_gemm.w8_ok
    # (from 17: the layers the mma GEMV and its chunks decline, and every layer past 64 rows)
    assert mx_gemm.W8 and mx_gemm.W8_MIN_M == 17 and mx_gemv_mma.MMA_CHUNK_MAX_M == 64
    assert ok(17, "fp8", False) and not ok(16, "fp8", False)
    assert not ok(4096, "fp8", True) and not ok(4096, "a16", False)  # gfx1201; 16-bit layers
    assert not ok(4096, "fp8", False, torch.float16)  # cuBLASLt's rowwise epilogue writes bf16
    assert ok(17, "fp8", False, rot_plane=4096) and not ok(16, "fp8", False, rot_plane=8704)
    assert not ok(95, "fp8", False, rot_plane=2048) and ok(96, "fp8", False, rot_plane=2048)
    assert not ok(95, "fp8", False, rot_plane=4095) and ok(96, "fp8", False, rot_plane=4095)
    assert not ok(4096, "fp8", False, rot_plane=512) and not ok(4096, "fp8", False, rot_plane=2047)
    assert mx_gemm.narrowest_plane(7168, (6144, 6656)) == 512
    assert mx_gemm.narrowest_plane(8192, (6144,)) == 2048
    assert mx_gemm.narrowest_plane(5120, ()) == 5120
    served = mx_route.served_act
    # 27B qkv at M = 2048: the 8-bit route unrotated, the dequant path (16-bit x) for PARO
    assert served(2048, "fp8", False, 7168, (6144, 6656)) == "fp8"
    assert served(2048, "fp8", False, 7168, (6144, 6656), rot=True) == "a16"
    assert served(2048, "fp8", False, 17408, (8704,), rot=True) == "fp8"  # gate_up
    assert served(80, "fp8", False, 17408, (8704,), rot=True) == "fp8"  # wide planes from 17
    # in_proj (6144 + 2048) at M = 80: the dequant path (16-bit x); at M = 40 on a plane bound
    # the mma GEMV declines (off the 32-column grid) the GEMM (fp8)
    assert served(80, "fp8", False, 8192, (6144,), rot=True) == "a16"
    assert served(40, "fp8", False, 8192, (6140,), rot=True) == "fp8"
    assert served(2048, "fp8", False, 5120, dtype=torch.float16) == "a16"  # the dequant path


def test_decode_chunks_dispatch() -> None:
    # H100 2026-12-05: past the mma GEMV's rows, to MMA_CHUNK_MAX_M, MMA_MAX_M-row chunks on
    # it (NVIDIA, where it takes the layer: N % 4, plane bounds % 32), 16-bit activations as it
    # takes them; past 64 rows, or where the mma GEMV declines the layer, the prefill routes. The
    # H100 2026-12-05: the mma GEMV itself to 32 rows (four tiles, measured), the chunks 32.
    from paro_kernels.triton import mx_repack

    ok, served, mma = mx_gemv_mma.chunks_ok, mx_route.served_act, mx_gemv_mma.mma_ok
    assert mx_gemv_mma.MMA_MAX_M == 32 and mx_gemv_mma.MMA_CHUNK_MAX_M == 64
    assert mma(17, 17408, (8704,), False) and mma(32, 7168, (6144, 6656), False)
    assert not mma(33, 7168, (6144, 6656), False) and not mma(24, 17408, (8704,), True)
    assert not ok(32, 17408, (8704,), False) and ok(33, 17408, (8704,), False)
    assert ok(64, 7168, (6144, 6656), False) and not ok(65, 7168, (6144, 6656), False)
    assert not ok(40, 17408, (8704,), True)  # gfx1201: the GEMM
    assert not ok(40, 17408, (8720,), False) and not ok(40, 17406, (), False)
    assert served(24, "fp8", False, 17408, (8704,), rot=True) == "a16"
    assert served(48, "fp8", False, 17408, (8704,), rot=True) == "a16"
    assert served(64, "fp8", False, 7168, (6144, 6656)) == "a16"
    assert served(65, "fp8", False, 7168, (6144, 6656)) == "fp8"  # the 8-bit route
    assert served(24, "fp8", False, 17408, (8720,)) == "fp8"  # mma declined: the 8-bit route
    with pytest.raises(ValueError, match="path"):
        mx_route.mx_linear(
            mx_repack.prepare(*mx_layer(16, 64, seed=1)), torch.zeros(1, 64), path="chunk"
        )


def test_interpreter_decode_chunks_match_fp64(interp_results: dict) -> None:
    # path="chunks" at MMA_MAX_M + 3 rows, MXFP4 and MXFP4-PARO: each chunk served as its own
    # call (the interpreter's paths: the fp8 GEMM at 32 rows, the FMA GEMV at 3), the rows in
    # order and the bias once a row, against the fp64 product of each chunk's own operands (the
    # fp8 chunk: the GEMM's e4m3 activations) at the fp16 output's floor.
    res = interp_results["chunks"]
    for name in ("plain", "paro"):
        r = res[name]
        assert r["shape"] == [r["step"] + 3, 128] and r["acts"] == ["fp8", "a16"], r
        assert r["same"] and r["rel"] <= 1e-3 and r["rel_tail"] <= 1e-3, r


@pytest.mark.parametrize("case", INTERP_CASES, ids=[c[0] for c in INTERP_CASES])
def test_interpreter_gemm_matches_fp64_reference(interp_results: dict, case: tuple) -> None:
    name, _, sizes, m, act, _, _ = case
    res = interp_results[name]
    assert res["shape"] == [m, sum(sizes)] and res["dtype"] == "torch.float16"
    # fp32 accumulation of exact products, fp16 output: the fp16 rounding floor (~3e-4).
    assert res["rel"] <= 1e-3, res
    if act == "fp8" and "scale_exact" in res:
        assert res["scale_exact"] and res["bad_not_carry"] == 0, res


def test_interpreter_fold_flush_is_detected_and_avoided(interp_results: dict) -> None:
    res = interp_results["flush"]
    assert res["span"] == 12 and not res["fold_ok"], res
    assert res["auto"] <= 1e-3, res  # the launcher chose the per-block GEMM: exact
    assert res["forced"] >= 0.99, res  # the fold would have flushed every contributing block


@pytest.mark.parametrize("case", GEMV_INTERP_CASES, ids=[c[0] for c in GEMV_INTERP_CASES])
def test_interpreter_gemv_matches_fp64_reference(interp_results: dict, case: tuple) -> None:
    name, _, sizes, m, _ = case
    runs = {key: v for key, v in interp_results["gemv"].items() if key.startswith(name + "/")}
    assert len(runs) == 4 and sum(bool(v.get("pf")) for v in runs.values()) == 1, runs
    for key, res in runs.items():
        assert res["shape"] == [m, sum(sizes)], (key, res)
        assert res["rel"] <= 1e-3, (key, res)  # exact products, fp32 sums: the fp16 floor


def test_interpreter_gemv_cases_cover_split_k(interp_results: dict) -> None:
    assert any(res["split"] > 1 for res in interp_results["gemv"].values()), interp_results


@pytest.mark.parametrize("case", MMA_INTERP_CASES, ids=[c[0] for c in MMA_INTERP_CASES])
def test_interpreter_mx_mma_gemv_matches_fp64(interp_results: dict, case: tuple) -> None:
    # The mma GEMV's plain-op path (the layout of its loads: paired activations, the scale
    # rows, the words of a block pair) on its paired fp16 input and on plain bf16 / fp16 rows,
    # fp32 out: exact products, fp32 sums. The pairing is checked exactly (position
    # 8 r + 2 j + h = channel 8 r + j + 4 h).
    name, _, sizes, m, rotated = case
    runs = {key: v for key, v in interp_results["mma"].items() if key.startswith(name + "/")}
    assert len(runs) == (2 if rotated else 6), runs
    for key, res in runs.items():
        assert res["shape"] == [m, sum(sizes)], res
        assert res["tiles"] == 8 * (1 if m <= 8 else 2 if m <= 16 else 4), res  # a chunk's
        assert res["pairing"] <= 2e-3, (key, res)  # the paired prologue rounds once to fp16
        assert res["rel"] <= 2e-5, (key, res)
    if not name.startswith("mma_paro"):
        assert all(res["pairing"] == 0 for res in runs.values()), runs
    else:  # the Givens records' paired prologue (served at M < 9) against the blocks'
        k = case[1]
        assert all(res["givens"] <= 2e-3 and res["gv_shape"] == [2, 4, k] for res in
                   runs.values()), runs  # fmt: skip


def test_interpreter_pair_fp16_saturates_and_pairs(interp_results: dict) -> None:
    # channels (0, 4), (1, 5), (2, 6), (3, 7) side by side; +-7e4 saturate at fp16's 65504
    assert interp_results["pair_sat"] == [65504.0, 3.0, -65504.0, 4.0, 1.0, 5.0, -2.0, 6.0]


# --------------------------------------------------------------------------- ahead of time

# The real per-rank shapes (TP=2) the launcher sees; configs come from `pick_config`.
AOT_SHAPES = [(1, 7168, 5120), (16, 17408, 5120), (64, 5120, 8704), (2048, 17408, 5120)]


@pytest.mark.parametrize("fold", [True, False])
@pytest.mark.parametrize("act", ["fp8", "a16"])
@pytest.mark.parametrize("target", ["gfx1201", "sm90"])
@pytest.mark.parametrize(("m", "n", "k"), AOT_SHAPES)
def test_aot_mx_gemm_isa(target: str, act: str, fold: bool, m: int, n: int, k: int) -> None:
    rep = aot.compile_mx_gemm(target, m, n, k, act, fold)  # type: ignore[arg-type]
    assert rep.mma, f"no {act} matrix instruction in {rep.name} for {target}: {rep}"
    assert rep.spills == 0 and rep.scratch == 0, rep
    assert rep.lds <= rep.lds_limit, rep
    if target == "gfx1201":
        assert 0 < rep.vgprs <= 256, rep
    assert triton.__version__


@pytest.mark.parametrize("target", ["gfx1201", "sm90"])
@pytest.mark.parametrize(
    ("m", "n", "k", "max_vgprs"),
    [(1, 7168, 5120, 128), (2, 17408, 5120, 160), (4, 5120, 8704, 224)],
)
def test_aot_mx_gemv_isa(target: str, m: int, n: int, k: int, max_vgprs: int) -> None:
    # The decode GEMV at its launcher's config: no matrix instruction in the loop (FMA units by
    # design), no spills; gfx1201 (plain-op unpack; not served there until measured, but
    # built) at its gfx1201 config (Triton 3.9): M = 1 89 VGPRs, M = 2 148, M = 4 111 (64 rows a
    # program), each under the budget that keeps >= 12 / 9 / 6 waves per SIMD (1536 VGPRs).
    from paro_kernels.triton import aot

    rep = aot.compile_mx_gemv(target, m, n, k)
    assert rep.mma, f"a matrix instruction in {rep}"  # type: ignore[attr-defined]
    assert rep.spills == 0 and rep.scratch == 0, rep  # type: ignore[attr-defined]
    if target == "gfx1201":
        assert 0 < rep.vgprs <= max_vgprs, rep  # type: ignore[attr-defined]


# (rotated, folded, out dtype): the 2026-12-04 plain and per-block rotated forms, the
# H200 2026-12-04's folded rotated form and the 8-bit route's e4m3 codes.
DEQUANT_AOT_FORMS = [(False, False, "bf16"), (False, False, "fp16"), (True, False, "bf16"),
                     (True, False, "fp16"), (True, True, "bf16"), (True, True, "fp16"),
                     (False, False, "fp8")]  # fmt: skip


@pytest.mark.parametrize("target", ["gfx1201", "sm90"])
@pytest.mark.parametrize(("rot", "fold", "dtype"), DEQUANT_AOT_FORMS,
                         ids=["-".join(map(str, f)) for f in DEQUANT_AOT_FORMS])  # fmt: skip
def test_aot_mx_dequant(target: str, rot: bool, fold: bool, dtype: str) -> None:
    # The prefill dequant at the launcher's config (gate_up's planes): the rotated kernel's dots
    # (per block, or folded into one chain) on the matrix unit (wgmma / mma.sync, WMMA), the
    # plain one and the e4m3 codes with none; no spills; gfx1201 (built, not served there)
    # within 192 VGPRs (>= 8 waves a SIMD: 165 rotated at 16 columns, 172 plain, 174 codes).
    bounds = (8704,) if rot else ()
    rep = aot.compile_mx_dequant(target, 17408, 5120, rot, dtype, bounds, fold)
    assert rep.mma == rot, rep  # type: ignore[attr-defined]
    assert rep.spills == 0 and rep.scratch == 0, rep  # type: ignore[attr-defined]
    assert rep.lds <= rep.lds_limit, rep  # type: ignore[attr-defined]
    if target == "gfx1201":
        assert 0 < rep.vgprs <= 192, rep  # type: ignore[attr-defined]


@pytest.mark.parametrize("target", ["gfx1201", "sm90"])
def test_aot_fp8_quant(target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    build, built = aot._aot_build, []
    monkeypatch.setattr(aot, "_aot_build", lambda *a: built.append(build(*a)) or built[-1])
    rep = aot.compile_fp8_quant(target, 5120)
    assert rep.spills == 0 and rep.scratch == 0 and rep.lds <= rep.lds_limit, rep
    if target == "gfx1201":
        assert 0 < rep.vgprs <= 256, rep
        # The codes' bytes from bits (`prologue.e4m3_bits`), not Triton's software conversion: that
        # took 130 v_cmp + 121 v_cndmask (776 instructions; 666 now); the false-tie break and
        # the masks keep 50 + 40.
        asm = built[-1].asm["amdgcn"]  # type: ignore[attr-defined]
        assert asm.count("v_cndmask") <= 64 and asm.count("v_cmp") <= 64, rep


@pytest.mark.parametrize("act", [0, 1], ids=["paired", "bf16"])
@pytest.mark.parametrize("m", [1, 2, 8, 9, 16, 17, 32])
def test_aot_mx_gemv_mma_sm90(m: int, act: int) -> None:
    # The MXFP4 mma GEMV at its launcher's config (NVIDIA only): per block pair
    # 4 mmas a tile (two chains of 2, one a block), 4 8-byte word loads, 2 scale words and 2
    # 16-byte activation loads a tile; with 2 pairs an iteration (M = 2..8) every word load of
    # both issued before the first mma (one memory round trip); 2 PRMT a column's word pair, no
    # layout conversion of data in the loop (no shared memory there), registers within what
    # the band's programs an SM count on (`mma_band`), no stack but under the band's register
    # cap (two tiles: 72, 16 bytes of stack with Triton 3.9; four tiles, M = 17..32: 128, 8
    # bytes). bf16 rows (NVFP4 -> MXFP4 as served): 4 cvt a row of 8.
    from paro_kernels.triton import aot

    bounds = (8704,)
    served = mx_gemv_mma.MMA_MIN_M <= m <= mx_gemv_mma.MMA_MAX_M
    assert mx_gemv_mma.mma_ok(m, 17408, bounds, False) == served
    assert not mx_gemv_mma.mma_ok(m, 17408, bounds, True)
    assert not mx_gemv_mma.mma_ok(m, 17406, (), False)
    assert not mx_gemv_mma.mma_ok(m, 17408, (8720,), False)
    rep, c = aot.compile_mx_gemv_mma("sm90", m, 17408, 5120, bounds, act)
    assert rep.mma and rep.spills == 0, rep
    ptx = c.asm["ptx"]  # type: ignore[attr-defined]
    tiles = mx_gemv_mma.mma_tiles(m)
    u, fit, cap = mx_gemv_mma.mma_band(m)
    assert f"unroll={u}" in rep.config
    body = ptx[ptx.index("$L__BB0_2:") : ptx.rindex("bra.uni") if "bra.uni" in ptx else None]
    loop = body[: body.index("bar.sync")] if "bar.sync" in body else body
    assert loop.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == 8 * tiles * u
    assert loop.count("ld.global.v2.b32") == 4 * u
    assert loop.count("ld.global.v4.b32") == 2 * tiles * u
    assert loop.count("prmt.b32") == 8 * u
    assert loop.count("cvt.rn.satfinite.f16x2.f32") == 8 * tiles * u * act
    words = loop[: loop.index("mma.sync")]
    assert words.count("ld.global.v2.b32") == 4 * u, "a pair's words loaded after an mma"
    assert "shared" not in loop
    usage = aot.cubin_usage(c)
    regs, stack = usage["REG"], usage["STACK"]
    assert 0 < regs <= (cap or 80) and stack <= (16 if cap else 0), usage
    slots = 65536 // (-(-regs // 8) * 8 * mx_gemv_mma.MMA_BLOCK_N)
    assert fit <= slots, (regs, fit, slots)
