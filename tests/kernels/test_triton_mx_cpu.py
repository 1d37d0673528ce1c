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
from paro_kernels import reference as ref
from paro_kernels.formats import e4m3_decode, pack_fp4
from paro_kernels.triton import mx_host

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


def _unrepack(w: mx_host.MxWeight) -> tuple[torch.Tensor, torch.Tensor]:
    """Invert `repack` in plain torch: (weight [N, K/2], weight_scale [N, K/32])."""
    n, k = w.n, w.k
    kp = w.qw.shape[1] * 2
    planes = w.qw.view(n, kp // 64, 32)
    codes = torch.stack((planes & 15, planes >> 4), 2).reshape(n, kp)[:, :k].contiguous()
    return pack_fp4(codes), w.sc[: k // 32].t().contiguous()


@pytest.mark.parametrize(("n", "k"), [(40, 96), (3, 64), (17, 544)])
def test_repack_round_trips_and_measures_the_span(n: int, k: int) -> None:
    weight, scale = mx_layer(n, k, seed=n, e_lo=-9, e_hi=-3)
    w = mx_host.repack(weight, scale)
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
    w = mx_host.repack(weight, scale)
    assert w.span == 12
    assert not w.fold_ok(0) and w.fold_ok(1) and w.fold_ok(2)
    scale[3, 5] = 127 - 3 - 14
    assert not mx_host.repack(weight, scale).fold_ok(1)


def test_contract_errors_name_the_argument() -> None:
    weight, scale = mx_layer(8, 64, seed=2)
    with pytest.raises(ValueError, match=r"weight_scale\.shape"):
        mx_host.repack(weight, scale[:, :1])
    bad = scale.clone()
    bad[1, 1] = 255
    with pytest.raises(ValueError, match="NaN"):
        mx_host.repack(weight, bad)
    with pytest.raises(ValueError, match="K"):
        mx_host.repack(weight[:, :8], scale[:, :1])  # K = 16
    runs = mx_host.random_runs(128, (24, 8), g=64)
    with pytest.raises(ValueError, match="multiples of 16"):
        mx_host.prepare(*mx_layer(32, 128, seed=3), runs, 64)


def test_fake_implementations_give_shapes() -> None:
    from paro_kernels.triton import mx_ops

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
# TRITON_INTERPRET is read when a kernel is decorated, so the interpreter runs in a child process.
_CHILD = """
import json, sys, torch
from test_triton_mx_cpu import GEMV_INTERP_CASES, INTERP_CASES, mx_layer, plane_ref, rel
from paro_kernels import mx

from paro_kernels.formats import e4m3_decode
from paro_kernels import reference as ref
from paro_kernels.triton import mx_host
out = {}
for name, k, sizes, m, act, rotated, fold in INTERP_CASES:
    n = sum(sizes)
    weight, scale = mx_layer(n, k, seed=k + m)
    runs = mx_host.random_runs(k, tuple(sizes), g=64, krot=4, seed=m) if rotated else None
    prep = mx_host.prepare(weight, scale, runs, 64 if rotated else 0, "cpu", torch.float16)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.float16)
    bias = torch.randn(n).to(torch.float16) if "bias" in name else None
    ops = mx_host.activations(prep, x, act)
    a, s = ops[0], (ops[1] if len(ops) > 1 else None)
    y = mx_host.mx_gemm(a, s, prep.weight, prep.bounds, torch.float16, bias, fold=fold)
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
prep = mx_host.prepare(weight, scale)
x = torch.randn(4, 128, generator=torch.Generator().manual_seed(4)).to(torch.float16)
x[:, :32] = 0
a, s = mx_host.activations(prep, x, "fp8")
r = plane_ref(a, s, mx.mxfp4_dequantize(weight, scale), ())
flush = {"fold_ok": prep.weight.fold_ok(0), "span": prep.weight.span}
for key, fold in (("auto", None), ("forced", True)):
    flush[key] = rel(mx_host.mx_gemm(a, s, prep.weight, (), torch.float16, fold=fold), r)
out["flush"] = flush
# The decode GEMV (plain-op unpack): fp16 activations, planes, bias, split-K, M = 1..4.
from paro_kernels.triton import mx_decode_host
gemv = {}
for name, k, sizes, m, rotated in GEMV_INTERP_CASES:
    n = sum(sizes)
    weight, scale = mx_layer(n, k, seed=k + m)
    runs = mx_host.random_runs(k, tuple(sizes), g=64, krot=4, seed=m) if rotated else None
    prep = mx_host.prepare(weight, scale, runs, 64 if rotated else 0, "cpu", torch.float16)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(torch.float16)
    bias = torch.randn(n).to(torch.float16)
    (a,) = mx_host.activations(prep, x, "a16")
    r = plane_ref(a, None, mx.mxfp4_dequantize(weight, scale), prep.bounds) + bias.double()
    for bn, pf in ((16, False), (32, False), (16, True)):  # PF: the next pair's prefetch
        cfg = mx_decode_host.gemv_config(m, n, k, prep.bounds, 4, block_n=bn, prefetch=pf)
        y = mx_decode_host.mx_gemv(a, prep.weight, prep.bounds, torch.float16, bias, cfg)
        gemv[f"{name}/{bn}/{pf}"] = {"rel": rel(y, r), "shape": list(y.shape),
                                     "split": cfg.split_k, "pf": cfg.prefetch}
    y = mx_host.mx_linear(prep, x, bias, "fp8")  # decode rows: the GEMV, 16-bit activations
    gemv[f"{name}/served"] = {"rel": rel(y, r), "shape": list(y.shape), "split": 0}
out["gemv"] = gemv
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


# --------------------------------------------------------------------------- ahead of time

# The real per-rank shapes (TP=2) the launcher sees; configs come from `pick_config`.
AOT_SHAPES = [(1, 7168, 5120), (16, 17408, 5120), (64, 5120, 8704), (2048, 17408, 5120)]


@pytest.mark.parametrize("fold", [True, False])
@pytest.mark.parametrize("act", ["fp8", "a16"])
@pytest.mark.parametrize("target", ["gfx1201", "sm90"])
@pytest.mark.parametrize(("m", "n", "k"), AOT_SHAPES)
def test_aot_mx_gemm_isa(target: str, act: str, fold: bool, m: int, n: int, k: int) -> None:
    rep = mx_host.compile_mx_gemm(target, m, n, k, act, fold)  # type: ignore[arg-type]
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
    from paro_kernels.triton import mx_decode_host

    rep = mx_decode_host.compile_mx_gemv(target, m, n, k)
    assert rep.mma, f"a matrix instruction in {rep}"  # type: ignore[attr-defined]
    assert rep.spills == 0 and rep.scratch == 0, rep  # type: ignore[attr-defined]
    if target == "gfx1201":
        assert 0 < rep.vgprs <= max_vgprs, rep  # type: ignore[attr-defined]


@pytest.mark.parametrize("target", ["gfx1201", "sm90"])
def test_aot_fp8_quant(target: str) -> None:
    rep = mx_host.compile_fp8_quant(target, 5120)
    assert rep.spills == 0 and rep.scratch == 0 and rep.lds <= rep.lds_limit, rep
    if target == "gfx1201":
        assert 0 < rep.vgprs <= 256, rep
