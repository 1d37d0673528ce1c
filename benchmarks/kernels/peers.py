"""Our ops as served and by path, against every W4 peer, in one run.

    python -m benchmarks.kernels.peers --out DIR/peers.json [--shapes qkv,gate_up] [--ms 1,16]
        [--budget-s 300] [--m-major] [--precompile N [--precompile-only]] [--skip V,..]
        [--skip-prefill V,..] [--skip-decode V,..]
        [--sweep-dequant-prologue|--sweep-gemv2-rot] [--gemlite-config FILE] [--only-check]

Per (shape, M): cuBLAS bf16, Marlin (`benchmarks.kernels.marlin`: built from `.peers/marlin`, the
no-hint build at M <= 64 and the published one above, each cell checked against fp32 before and
after its timing; a failed check is an error row, not a time), `torch._weight_int4pack_mm`
(g128), GemLite A16W4 / A8W4 g128 (when importable; autotune pinned by --gemlite-config, written
back after the run), fp8 `torch._scaled_mm` rowwise (activations pre-quantized: the GEMM
alone), ours as served (`route.linear`: the M-band dispatch, prologue included) and each of our
paths (gemv with the block prologue, gemv with the Givens layers inside, the tile kernels,
dequant + cuBLAS), and the W4A8 ops as served. Timing and DRAM feeding: `time_us` (CUDA-graph
replays over weight copies past 4x L2; each shape's layers made once for every M). Roofline:
format-minimal bytes over the copy bandwidth this run measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import functools
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.kernels import marlin
from benchmarks.kernels.common import (
    SHAPES,
    G,
    bounds,
    bytes_w4,
    copies,
    cycling,
    goal_first_cells,
    int4pack,
    measure_peaks,
    mx_preps,
    random_prep,
    time_us,
    with_givens,
)

W4_PEERS = ("marlin", "int4pack", "gemlite-a16w4", "gemlite-a8w4")


def _rot_bytes(k: int, parts: int, krot: int = 8) -> int:
    """Givens records per layer: a partner byte + an fp32 angle per channel per layer, + scales."""
    return parts * (k * krot * 5 + 4 * k)


def _ours(n: int, k: int, sizes: tuple[int, ...], m: int, dev: torch.device, path: str | None,
          fmt: str = "bf16") -> Callable[[], object]:  # fmt: skip
    from paro_kernels.triton import dequant, gemm, gemv_fma, prologue, route

    if fmt.startswith("mxfp4"):
        return _mx(n, k, sizes, m, dev, fmt == "mxfp4-paro")
    preps = _int_preps(n, k, sizes, 5 if fmt == "int5" else 4, dev)
    bits = preps[0].bits
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    if fmt.startswith("w8-"):  # the 8-bit vendor GEMM path of W4A8 prefill, forced

        def w8(p: Any) -> object:
            return dequant.w8_linear(p, x, None, fmt[3:])

        return cycling([functools.partial(w8, p) for p in preps])
    if fmt.startswith("a8-"):  # the A8 kernels themselves (prologue + group GEMM), no route

        def a8(p: Any) -> object:
            q, asc, rs = prologue.rotate_quant(x, p.rot_hi, p.rot_lo, G, fmt[3:], "group")
            return gemm.w4a8_gemm(q, asc, rs, p, x.dtype)

        return cycling([functools.partial(a8, p) for p in preps])
    if fmt != "bf16":  # W4A8 int8 / fp8, or int5 (W5A8 I8 PG ZPE: int8 activations)
        act = "int8" if fmt == "int5" else fmt
        return cycling([functools.partial(route.linear_a8, p, x, None, act, "group", bits == 5)
                        for p in preps])  # fmt: skip

    if path == "gemv":  # the prologue GEMV (blocks / sliced): the layers without the tables
        preps = [dataclasses.replace(p, gv_idx=None, gv_coef=None) for p in preps]

    def call(p: Any) -> object:
        if path == "gemv":
            return gemv_fma.gemv_w4a16(p, x)
        if path == "dequant-kn":  # the dequant path with W' stored [K, N] (served before)
            return dequant.dequant_linear(x, dequant.dequant_weights(p, x.dtype, nk=False), None)
        if path == "gemv-rot2":
            return gemv_fma.gemv2_w4a16_rot(x, p)
        return route.linear(p, x, path=path)

    return cycling([functools.partial(call, p) for p in preps])


@functools.cache
def _int_preps(n: int, k: int, sizes: tuple[int, ...], bits: int, dev: torch.device) -> list[Any]:
    """A shape's random layers (copies past 4x L2), made once for every M of the run: as the
    plugin prepares a layer, the Givens tables and the W4A8 channel maxima beside it (random
    here; `path-gemv-blocks` drops the tables: the prologue path)."""
    preps = [random_prep(n, k, sizes, bits, dev) for _ in range(copies(bytes_w4(n, k, 0)))]
    return [dataclasses.replace(with_givens(p, k, len(sizes), dev),
                                w8_amax=torch.rand(n, device=dev) + 0.5)
            for p in preps]  # fmt: skip


_mx_preps = functools.cache(mx_preps)  # the same, MXFP4 / MXFP4-PARO


def _mx(n: int, k: int, sizes: tuple[int, ...], m: int, dev: torch.device,
        rot: bool) -> Callable[[], object]:  # fmt: skip
    """MXFP4 as served (`mx_route.mx_linear`, the W4A8 fp8 layer of the box's checkpoints: its
    M-band route): NVFP4 -> MXFP4 (no rotation), or MXFP4-PARO (`rot`: the layer's Givens
    records, one rotation per partition)."""
    from paro_kernels.triton import mx_route

    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    preps = _mx_preps(n, k, sizes, rot, dev)
    return cycling([functools.partial(mx_route.mx_linear, p, x, None, "fp8") for p in preps])


def _bytes(kind: str, n: int, k: int, m: int, act: int, parts: int) -> int:
    """A variant's format-minimal bytes by kind: int4 (`bytes_w4`), int5 (a fifth bit a
    weight more), MXFP4 (e2m1 codes + e8m0 scales a 32-block, activations once a partition with
    the rotation), 8-bit weights."""
    if kind == "w8":
        return k * n + m * k + 2 * m * n
    if kind == "int5":
        return bytes_w4(n, k, m, act) + k * n // 8
    if kind == "mx":
        return n * k // 2 + n * k // 32 + parts * act * m * k + 2 * m * n
    if kind == "marlin":  # int4 codes + fp16 scales (symmetric: no zeros)
        return k * n // 2 + (k // G) * n * 2 + act * m * k + 2 * m * n
    return bytes_w4(n, k, m, act)


def _gemlite(n: int, k: int, m: int, dev: torch.device, a8: bool) -> Callable[[], object]:
    from gemlite import helper  # type: ignore[import-not-found]

    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    fns = []
    for _ in range(copies(bytes_w4(n, k, 0))):
        wq = torch.randint(0, 16, (n, k), dtype=torch.uint8, device=dev)
        sc = (torch.rand(n, k // G, device=dev) * 0.01).to(torch.bfloat16)
        zp = torch.full((n, k // G), 8.0, device=dev).to(torch.bfloat16)
        cls = helper.A8W4_HQQ_INT_dynamic if a8 else helper.A16W4_HQQ_INT
        layer = cls(device=dev, dtype=torch.bfloat16).from_weights(wq, sc, zp)
        fns.append(functools.partial(layer.forward, x))
    return cycling(fns)


def _scaled_mm(n: int, k: int, m: int, dev: torch.device) -> Callable[[], object]:
    x = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
    sa = torch.rand(m, 1, device=dev)
    fns = []
    for _ in range(copies(k * n)):
        w = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn)
        sb = torch.rand(1, n, device=dev)
        fns.append(functools.partial(torch._scaled_mm, x, w.t(), sa, sb, out_dtype=torch.bfloat16))
    return cycling(fns)


def cell_variants(m: int) -> list[tuple[str, str, Callable[..., Callable[[], object]], int]]:
    """(name, kind, builder(n, k, sizes, m, dev), activation bytes) of one cell."""
    from paro_kernels.triton import gemv_fma

    v: list[tuple[str, str, Callable[..., Callable[[], object]], int]] = [
        ("ours-w4a16", "ours", lambda n, k, s, m, d: _ours(n, k, s, m, d, None), 2),
        ("ours-w4a8-int8", "ours", lambda n, k, s, m, d: _ours(n, k, s, m, d, None, fmt="int8"), 2),
        ("ours-w4a8-fp8", "ours", lambda n, k, s, m, d: _ours(n, k, s, m, d, None, fmt="fp8"), 2),
        # every format as served
        ("ours-int5", "int5", lambda n, k, s, m, d: _ours(n, k, s, m, d, None, fmt="int5"), 2),
        ("ours-mxfp4", "mx", lambda n, k, s, m, d: _ours(n, k, s, m, d, None, fmt="mxfp4"), 2),
        (
            "ours-mxfp4-paro",
            "mx",
            lambda n, k, s, m, d: _ours(n, k, s, m, d, None, fmt="mxfp4-paro"),
            2,
        ),
        ("marlin", "marlin", marlin.peer, 2),
        ("int4pack", "peer", lambda n, k, s, m, d: int4pack(n, k, m, d), 2),
        ("gemlite-a16w4", "peer", lambda n, k, s, m, d: _gemlite(n, k, m, d, False), 2),
        ("gemlite-a8w4", "peer", lambda n, k, s, m, d: _gemlite(n, k, m, d, True), 1),
        ("fp8-scaled-mm", "w8", lambda n, k, s, m, d: _scaled_mm(n, k, m, d), 1),
    ]
    if m <= 16:
        v += [
            ("path-w4a8-int8-a8", "path",
             lambda n, k, s, m, d: _ours(n, k, s, m, d, None, fmt="a8-int8"), 2),
            ("path-mma", "path", lambda n, k, s, m, d: _ours(n, k, s, m, d, "mma"), 2),
        ]  # fmt: skip
    if m <= gemv_fma.GEMV2_MAX_M:
        v += [("path-gemv-blocks", "path", lambda n, k, s, m, d: _ours(n, k, s, m, d, "gemv"), 2)]
    if m >= 64:
        v += [
            (
                "path-w8-fp8",
                "path",
                lambda n, k, s, m, d: _ours(n, k, s, m, d, None, fmt="w8-fp8"),
                2,
            ),
            (
                "path-w8-int8",
                "path",
                lambda n, k, s, m, d: _ours(n, k, s, m, d, None, fmt="w8-int8"),
                2,
            ),
            ("path-mma", "path", lambda n, k, s, m, d: _ours(n, k, s, m, d, "mma"), 2),
            ("path-dequant", "path", lambda n, k, s, m, d: _ours(n, k, s, m, d, "dequant"), 2),
            ("path-dequant-kn", "path",
             lambda n, k, s, m, d: _ours(n, k, s, m, d, "dequant-kn"), 2),
        ]  # fmt: skip
    return v


def bench_cell(name: str, n: int, k: int, sizes: tuple[int, ...], m: int, reps: int,
               bw: float, skip: set[str]) -> list[dict[str, Any]]:  # fmt: skip
    """Every variant on one (shape, M); ratios filled in by `finish`."""
    from paro_kernels.triton import route

    dev = torch.device("cuda")
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    wd = [torch.randn(k, n, device=dev, dtype=torch.bfloat16) for _ in range(copies(2 * k * n))]
    rows = [{"shape": name, "m": m, "n": n, "k": k, "parts": len(sizes), "variant": "cublas-bf16",
             "us": time_us(cycling([functools.partial(torch.matmul, x, w) for w in wd]), reps),
             "bytes": 2 * k * n + 2 * m * k + 2 * m * n}]  # fmt: skip
    del wd
    for vname, kind, build, act in cell_variants(m):
        if _skipped(vname, skip):
            continue
        err, us, extra = "", float("nan"), dict[str, Any]()
        try:
            fn = build(n, k, sizes, m, dev)
            us, err, extra = _checked_time(fn, reps)
        except Exception as e:  # one broken variant must not lose the cell
            err = f"{type(e).__name__}: {str(e)[:300]}"
        torch.cuda.empty_cache()
        parts = len(sizes) if vname != "ours-mxfp4" else 1
        rotated = kind in ("ours", "path", "int5") or vname == "ours-mxfp4-paro"
        rows.append({"shape": name, "m": m, "n": n, "k": k, "parts": len(sizes),
                     "variant": vname, "kind": kind, "us": us, "error": err,
                     "bytes": _bytes(kind, n, k, m, act, parts),
                     "rot_bytes": _rot_bytes(k, len(sizes)) if rotated else 0,
                     "band": route.band(m), **extra})  # fmt: skip
    return finish(rows, bw)


def _checked_time(fn: Callable[[], object], reps: int) -> tuple[float, str, dict[str, Any]]:
    """(us, error, extra row fields): a closure with a `check` (Marlin's `Cell`) is checked
    against its fp32 reference before and after the timing; a failed check is not timed."""
    check = getattr(fn, "check", None)
    if check is None:
        return time_us(fn, reps), "", {}
    extra: dict[str, Any] = {"build": getattr(fn, "build", ""), "check_rel": [check()]}
    if not marlin.Cell.ok(extra["check_rel"][0]):
        return float("nan"), f"check failed: rel {extra['check_rel'][0]:.2e}", extra
    us = time_us(fn, reps)
    extra["check_rel"].append(check())
    if not marlin.Cell.ok(extra["check_rel"][1]):
        return float("nan"), f"check failed after timing: rel {extra['check_rel'][1]:.2e}", extra
    return us, "", extra


def finish(rows: list[dict[str, Any]], bw: float) -> list[dict[str, Any]]:
    """Add GB/s, % roofline (with and without rotation records), x cuBLAS, x Marlin, x best W4
    peer (Marlin among them)."""
    cub = next(r["us"] for r in rows if r["variant"] == "cublas-bf16")
    mar = next((r["us"] for r in rows if r["variant"] == "marlin"), float("nan"))
    peers = [r["us"] for r in rows if r["variant"] in W4_PEERS and r["us"] == r["us"]]
    best = min(peers) if peers else float("nan")
    for r in rows:
        s = r["us"] * 1e-6
        r["gbs"] = r["bytes"] / s / 1e9
        r["roofline"] = r["bytes"] / bw / s
        r["roofline_rot"] = (r["bytes"] + r.get("rot_bytes", 0)) / bw / s
        r["x_cublas"] = cub / r["us"]
        r["x_marlin"] = mar / r["us"]
        r["x_best_w4_peer"] = best / r["us"]
    return rows


GEMV2_ROT_SWEEP: list[dict[str, Any]] = [
    # the Givens-inside FMA GEMV: word rows per chunk, programs per SM, warps
    dict(kw=8, programs_per_sm=8), dict(kw=4, programs_per_sm=8),
    dict(kw=8, programs_per_sm=8, num_warps=8, block_n=1024),
    dict(kw=4, programs_per_sm=8, num_warps=8, block_n=1024),
    dict(kw=8, programs_per_sm=8, pre=False),
]  # fmt: skip


def sweep_gemv2_rot(
    reps: int, shapes: tuple[str, ...], ms: tuple[int, ...]
) -> list[dict[str, Any]]:
    """The Givens-inside GEMV (`gemv2_w4a16_rot`) at candidate configs, the prologue GEMV as served
    (sliced prologue + GEMV) beside it, per (shape, M)."""
    from paro_kernels.triton import gemv_fma

    dev = torch.device("cuda")
    out = []
    for name in shapes:
        _, n, k, sizes = next(s for s in SHAPES if s[0] == name)
        preps = [with_givens(random_prep(n, k, sizes, 4, dev), k, len(sizes), dev)
                 for _ in range(copies(bytes_w4(n, k, 0)))]  # fmt: skip
        for m in ms:
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            old = [functools.partial(gemv_fma.gemv_w4a16,
                   dataclasses.replace(p, gv_idx=None, gv_coef=None), x)
                   for p in preps]  # fmt: skip
            cands: list[tuple[str, Any, list[Any]]] = [("prologue-gemv", None, old)]
            for kw in GEMV2_ROT_SWEEP:
                kc = {a: v for a, v in kw.items() if a != "pre"}
                cfg = gemv_fma.gemv2_config(m, n, k, G, bounds(sizes), 132, **kc)
                fs = [functools.partial(gemv_fma.gemv2_w4a16_rot, x, p, None, cfg, kw.get("pre"))
                      for p in preps]  # fmt: skip
                cands.append((str(kw), cfg, fs))
            for label, cfg, fs in cands:
                try:
                    us = time_us(cycling(fs), reps)
                except Exception as e:
                    us = float("nan")
                    print("sweep error", type(e).__name__, str(e)[:300])
                nb = bytes_w4(n, k, m)
                out.append({"shape": name, "m": m, "variant": label, "us": us,
                            "cfg": None if cfg is None else dataclasses.asdict(cfg),
                            "hbm_pct_4p3": nb / 4.3e12 / (us * 1e-6) * 100})  # fmt: skip
                print(f"gemv2-rot {name} M={m} {label}: {us:.2f} us {out[-1]['hbm_pct_4p3']:.0f}%",
                      flush=True)  # fmt: skip
    return out


DEQUANT_KERNELS_SWEEP: list[dict[str, Any]] = [
    # (kernel, BLOCK_N, warps, stages, programs per SM); the first: the plain kernel's default
    # of 2026-12-01, bf16 out
    dict(trans=False, block_n=64, num_warps=4, num_stages=3, programs_per_sm=2),
    dict(trans=True, block_n=64, num_warps=4, num_stages=2, programs_per_sm=4),
    dict(trans=True, block_n=64, num_warps=4, num_stages=1, programs_per_sm=4),
    dict(trans=True, block_n=64, num_warps=4, num_stages=3, programs_per_sm=4),
    dict(trans=True, block_n=64, num_warps=4, num_stages=2, programs_per_sm=8),
    dict(trans=True, block_n=64, num_warps=4, num_stages=2, programs_per_sm=2),
    dict(trans=True, block_n=128, num_warps=4, num_stages=2, programs_per_sm=4),
    dict(trans=True, block_n=128, num_warps=8, num_stages=2, programs_per_sm=4),
    dict(trans=True, block_n=32, num_warps=4, num_stages=2, programs_per_sm=8),
    dict(trans=True, block_n=256, num_warps=8, num_stages=2, programs_per_sm=2),
]
PROLOGUE_SLICES_SWEEP: list[dict[str, int]] = [
    dict(slice_=128, num_warps=4), dict(slice_=64, num_warps=4), dict(slice_=32, num_warps=4),
    dict(slice_=16, num_warps=4), dict(slice_=32, num_warps=2), dict(slice_=16, num_warps=2),
    dict(slice_=64, num_warps=2),
]  # fmt: skip


def sweep_dequant_kernels(
    reps: int, shapes: tuple[str, ...], table: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The prefill weight pass alone (bf16 W'), both kernels at candidate configs."""
    from paro_kernels.triton import dequant

    dev = torch.device("cuda")
    out = []
    for name in shapes:
        _, n, k, sizes = next(s for s in SHAPES if s[0] == name)
        preps = [random_prep(n, k, sizes, 4, dev) for _ in range(copies(bytes_w4(n, k, 0)))]
        w = torch.empty(k, n, dtype=torch.bfloat16, device=dev)
        nb = k * n // 2 + (k // G) * n * 3 + 2 * k * n  # codes + scales + zeros in, W' out
        for kw in table or DEQUANT_KERNELS_SWEEP:
            fns = [functools.partial(
                dequant.dequant_rotate, p, w, **kw) for p in preps]  # fmt: skip
            try:
                us = time_us(cycling(fns), reps)
            except Exception as e:
                us = float("nan")
                print("sweep error", type(e).__name__, str(e)[:300])
            out.append(
                {"shape": name, **kw, "us": us, "hbm_pct_4p3": nb / 4.3e12 / (us * 1e-6) * 100}
            )
            print(f"dequant {name} {kw}: {us:.1f} us {out[-1]['hbm_pct_4p3']:.0f}%", flush=True)
    return out


def sweep_prologue_slices(
    reps: int, shapes: tuple[str, ...], ms: tuple[int, ...]
) -> list[dict[str, Any]]:
    """The decode prologue alone, the block kernel against the sliced one, and the
    GEMV behind the sliced prologue's partial row sums."""
    from paro_kernels.triton import gemv_fma, prologue

    dev = torch.device("cuda")
    out = []
    for name in shapes:
        _, n, k, sizes = next(s for s in SHAPES if s[0] == name)
        preps = [random_prep(n, k, sizes, 4, dev) for _ in range(copies(bytes_w4(n, k, 0)))]
        for m in ms:
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            fns: list[Any] = [functools.partial(prologue.rotate_scale, x, p.rot_hi, p.rot_lo, G,
                                                nibble_scaled=True) for p in preps]  # fmt: skip
            cands: list[tuple[str, list[Any]]] = [("blocks", fns)]
            for kw in PROLOGUE_SLICES_SWEEP:
                sf = [functools.partial(prologue.rotate_slices, x, p.rot_hi, p.rot_lo, G,
                                        kw["slice_"], kw["num_warps"]) for p in preps]  # fmt: skip
                cands.append((f"slice{kw['slice_']}w{kw['num_warps']}", sf))
            for label, fs in cands:
                try:
                    us = time_us(cycling(fs), reps)
                except Exception as e:
                    us = float("nan")
                    print("sweep error", type(e).__name__, str(e)[:300])
                out.append({"shape": name, "m": m, "kind": "prologue", "variant": label, "us": us})
                print(f"prologue {name} M={m} {label}: {us:.2f} us", flush=True)
            p0 = preps[0]
            for label, (xr, rs) in (
                (
                    "gemv-blocks",
                    prologue.rotate_scale(x, p0.rot_hi, p0.rot_lo, G, nibble_scaled=True),
                ),
                ("gemv-sliced", prologue.rotate_slices(x, p0.rot_hi, p0.rot_lo, G)),
            ):
                gf = [functools.partial(gemv_fma.gemv2_w4a16, xr, rs, p, torch.bfloat16)
                      for p in preps]  # fmt: skip
                us = time_us(cycling(gf), reps)
                out.append({"shape": name, "m": m, "kind": "gemv", "variant": label, "us": us})
                print(f"gemv2 {name} M={m} {label}: {us:.2f} us", flush=True)
    return out


def check(dev: str = "cuda") -> list[str]:
    """Fast correctness smoke of every path against the fp64 reference (goal shapes are slow)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "kernels"))
    from _triton_cases import bias, merged_layer, packed, reference, rel, runs  # type: ignore
    from paro_kernels.triton import gemv_fma, repack, route

    out = []
    for k, sizes, m in [(1024, [512, 128, 128], 1), (2304, [2048, 256], 3), (640, [1000], 2),
                        (1024, [512, 128, 128], 9), (2304, [2048, 256], 16),
                        (1024, [256, 128], 300), (1536, [208, 136], 257)]:  # fmt: skip
        parts = merged_layer(k, sizes, G if k % 128 == 0 else 64, seed=k, bias=True)
        g = G if k % 128 == 0 else 64
        prep = repack.prepare(*packed(parts), runs(parts), g, device=dev)  # type: ignore[call-arg,misc]
        x = torch.randn(m, k).to(torch.bfloat16)
        ref = reference(x, parts, g)
        for path in ("gemv", "mma", "dequant"):
            if path == "gemv" and m > gemv_fma.GEMV2_MAX_M:
                continue
            y = route.linear(prep, x.to(dev), bias(parts).to(dev), path=path)
            out.append(f"check k={k} sizes={sizes} m={m} {path}: rel {rel(y, ref):.2e}")
            print(out[-1], flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    """Run the peers bench; JSON written after every cell."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="peers.json")
    ap.add_argument("--ms", default="1,2,4,8,16,32,64,256,2048,8192")
    ap.add_argument("--shapes", default="qkv,o_proj,gate_up,down,in_proj,8b-qkv,8b-o_proj,"
                                        "8b-gate_up,8b-down")  # fmt: skip
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--budget-s", type=float, default=0, help="start no cell after this long")
    ap.add_argument(
        "--m-major",
        action="store_true",
        help="cells in --ms order (all shapes at each M), not goal cells first",
    )
    ap.add_argument(
        "--precompile",
        type=int,
        default=0,
        help="fill Triton's cache for our variants in N processes first",
    )
    ap.add_argument("--precompile-only", action="store_true", help="stop after --precompile")
    ap.add_argument("--precompile-s", type=float, default=0, help="end the precompile after")
    ap.add_argument("--skip", default="", help="comma-separated variant names (globs) not to run")
    ap.add_argument("--skip-prefill", default="", help="variants not run at M >= 1024")
    ap.add_argument("--skip-decode", default="", help="variants not run at M < 1024")
    ap.add_argument("--sweep-dequant-prologue", action="store_true",
                    help="the dequant kernels and the sliced prologues alone")  # fmt: skip
    ap.add_argument("--sweep-gemv2-rot", action="store_true",
                    help="the Givens-inside GEMV's configs, M = 1, 2")  # fmt: skip
    ap.add_argument("--sweep-shapes", default="qkv,o_proj,gate_up,down,in_proj")
    ap.add_argument("--gemlite-config", default="")
    ap.add_argument("--only-check", action="store_true")
    ap.add_argument("--no-check", action="store_true", help="skip the correctness smoke")
    argv = sys.argv[1:] if argv is None else argv  # recorded in the JSON
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    t0 = time.monotonic()
    meta: dict[str, Any] = {"check": [] if args.no_check else check()}
    if args.only_check:
        return
    if args.gemlite_config:
        _gemlite_pin(args.gemlite_config, load=True)
    skip = set(filter(None, args.skip.split(",")))
    shapes, ms = args.shapes.split(","), [int(v) for v in args.ms.split(",")]
    cells = goal_first_cells(shapes, ms)
    if args.m_major:
        cells.sort(key=lambda c: (ms.index(c[4]), shapes.index(c[0])))
    if args.precompile > 1:
        jobs = [(c[0], c[4], v[0]) for c in cells for v in cell_variants(c[4])
                if v[1] in ("ours", "int5", "mx") and not _skipped(v[0], skip)]  # fmt: skip
        _precompile(jobs, args.precompile, args.precompile_s)
    if args.precompile_only:
        return
    bw, mm = measure_peaks()
    meta.update(device=torch.cuda.get_device_name(0), copy_bw=bw, bf16_flops=mm,
                torch=torch.__version__, triton=__import__("triton").__version__, rows=[],
                not_run=[], command=" ".join(["python -m benchmarks.kernels.peers", *(argv or [])]),
                marlin_rel_bound=marlin.REL_BOUND,
                )  # fmt: skip
    if args.sweep_dequant_prologue:
        sh = tuple(args.sweep_shapes.split(","))
        meta["sweep_dequant_kernels"] = sweep_dequant_kernels(args.reps, sh)
        meta["sweep_prologue_slices"] = sweep_prologue_slices(args.reps, sh, (1, 2))
    if args.sweep_gemv2_rot:
        meta["sweep_gemv2_rot"] = sweep_gemv2_rot(
            args.reps, tuple(args.sweep_shapes.split(",")), (1, 2)
        )
    _dump(args.out, meta)
    for name, n, k, sizes, m in cells:
        if args.budget_s and time.monotonic() - t0 > args.budget_s:
            meta["not_run"].append(f"{name}@{m}")
            continue
        pskip = set(filter(None, (args.skip_prefill if m >= 1024 else args.skip_decode).split(",")))
        rows = bench_cell(name, n, k, sizes, m, args.reps, bw, skip | pskip)
        meta["rows"] += rows
        for r in rows:
            print(f"{r['shape']} M={r['m']} {r['variant']}: {r['us']:.1f} us "
                  f"{r['roofline']:.0%} x{r['x_cublas']:.2f} cuBLAS x{r['x_marlin']:.2f} Marlin "
                  f"x{r['x_best_w4_peer']:.2f} peer {r.get('error', '')[:80]} "
                  f"({time.monotonic() - t0:.0f} s)", flush=True)  # fmt: skip
        _dump(args.out, meta)
    if args.gemlite_config:
        _gemlite_pin(args.gemlite_config, load=False)
    _dump(args.out, meta)


def _dump(path: str, meta: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump(meta, f, indent=1)


def _skipped(vname: str, skip: set[str]) -> bool:
    return any(fnmatch.fnmatchcase(vname, pat) for pat in skip)


def _precompile(jobs: list[tuple[str, int, str]], procs: int, limit_s: float) -> None:
    """`_compile_variant` over `jobs` in `procs` spawned processes, ended (workers terminated)
    after `limit_s` when set: the rest compile in the run itself."""
    import multiprocessing as mp

    t, errs, done = time.monotonic(), [], 0
    with mp.get_context("spawn").Pool(procs) as pool:  # leaving it terminates the workers
        for err in pool.imap_unordered(_compile_variant, jobs):
            done += 1
            errs += [err] if err else []
            if limit_s and time.monotonic() - t > limit_s:
                break
    print(f"precompiled {done} of {len(jobs)} in {time.monotonic() - t:.0f} s; errors "
          f"{len(errs)} {errs[:4]}", flush=True)  # fmt: skip


def _compile_variant(job: tuple[str, int, str]) -> str:
    """`precompile_pool` worker: one call of a variant at (shape, M), filling Triton's cache."""
    name, m, vname = job
    _, n, k, sizes = next(s for s in SHAPES if s[0] == name)
    build = next(v[2] for v in cell_variants(m) if v[0] == vname)
    try:
        build(n, k, sizes, m, torch.device("cuda"))()
        torch.cuda.synchronize()
        return ""
    except Exception as e:
        return f"{name} {m} {vname}: {type(e).__name__} {str(e)[:200]}"
    finally:  # 16 workers must not each keep every shape's layers
        _int_preps.cache_clear()
        _mx_preps.cache_clear()


def _gemlite_pin(path: str, load: bool) -> None:
    """Load (before) or save (after) GemLite's autotune cache, so two runs pick the same configs."""
    try:
        import gemlite  # type: ignore[import-not-found]
    except ImportError:
        return
    if load:
        from pathlib import Path

        shipped = Path(gemlite.__file__).parent / "configs" / "h100.json"  # the H200's sibling
        gemlite.load_config(path if Path(path).exists() else str(shipped), print_error=False)
    else:
        gemlite.cache_config(path)


if __name__ == "__main__":
    main()
