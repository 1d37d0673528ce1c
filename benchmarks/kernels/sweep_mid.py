"""The mid band's launch configurations (M = 17..192), GPU only.

Between the decode band (M <= 16: 16-row tiles, split-K until about 8 programs per SM) and
prefill, the tile GEMMs take 64-row tiles and split K only until the tiles cover the SMs once
(`gemm.pick_config`, `gemm.pick_config_a8`, `mx_gemm.pick_config`): one 4-warp program per SM.
On the H100 (2026-12-05) that band measured 0.3-0.7x cuBLAS bf16 while the same kernels at
M = 16 beat it. This sweep times each GEMM alone (its operands made once) at row tiles of 16,
32 and 64 (128 from M = 128) and split-K until about P = 1, 2, 4, 8 programs per SM, cuBLAS bf16
in the same cell, on the Qwen3.8-27B TP=2 shapes, and prints which config wins per cell.

    python -m benchmarks.kernels.sweep_mid OUT.json [--ms 64,32,128,192] [--budget-s 400]

Weights DRAM-fed (copies exceed the L2 4x), CUDA-graph replays (`mx._graph_time`).
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable
from typing import Any

import torch
from paro_kernels.triton import gemm, launch, mx_gemm, mx_repack, prologue, repack

from benchmarks.kernels import common
from benchmarks.kernels import mx as mx_bench
from benchmarks.kernels.common import SHAPES, G, copies, random_prep

KERNELS = ("w4a16", "w4a8-fp8", "mxfp4-fp8")


def _split(k_units: int, tiles: int, programs: int, sms: int, min_per: int) -> int:
    """Splits of K (k_units groups or pairs) so that about programs x sms programs run,
    at least min_per units a split, normalized so no split is empty."""
    split = max(1, min(k_units // min_per, -(-programs * sms // tiles)))
    per = -(-k_units // split)
    return -(-k_units // per)


def configs(kernel: str, m: int, n: int, k: int, sms: int) -> list[Any]:
    """The candidates of one cell: row tiles 16 / 32 / 64 (/ 128 from M = 128), 128 columns,
    split-K to about 1, 2, 4, 8 programs per SM; int4 W4A16 also with the decode band's flags
    (the zero point as the row-sum correction, the plane dots)."""
    out: list[Any] = []
    tiles_m = [bm for bm in (16, 32, 64, 128) if bm < 2 * m and (bm < 128 or m >= 128)]
    units = k // (64 if kernel.startswith("mxfp4") else G)
    for bm in tiles_m:
        tiles = -(-m // bm) * -(-n // 128)
        for programs in (1, 2, 4, 8):
            split = _split(units, tiles, programs, sms, 2)
            stages = 4 if bm <= 32 or kernel != "w4a16" else 3
            if kernel == "w4a16":
                out.append(launch.Config(bm, 128, split, 4, stages))
                out.append(launch.Config(bm, 128, split, 4, stages, rowsum=True, planes=True))
            elif kernel == "w4a8-fp8":
                out.append(launch.Config(bm, 128, split, 4, stages))
            else:
                out.append(mx_repack.Config(bm, 128, split, 4, stages))
    return list(dict.fromkeys(out))


def short(cfg: Any) -> str:
    flags = "+rp" if getattr(cfg, "rowsum", False) else ""
    return f"{cfg.block_m}x{cfg.block_n}s{cfg.split_k}w{cfg.num_warps}st{cfg.num_stages}{flags}"


def _cell(name: str, n: int, k: int, sizes: tuple[int, ...], m: int,
          deadline: float) -> dict[str, object]:  # fmt: skip
    dev = torch.device("cuda")
    sms = launch.sm_count(dev)
    bounds = common.bounds(sizes)
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    dense = [torch.randn(k, n, device=dev, dtype=torch.bfloat16)
             for _ in range(copies(n * k * 2))]  # fmt: skip
    preps = [random_prep(n, k, sizes, 4, dev) for _ in range(copies(n * k // 2))]
    p0 = preps[0]
    xr, rs = prologue.rotate_scale(x, p0.rot_hi, p0.rot_lo, G)
    q, asc, qrs = prologue.rotate_quant(x, p0.rot_hi, p0.rot_lo, G, "fp8", "group")
    mxw = [mx_repack.prepare(*mx_repack.random_checkpoint(n, k, seed=i), None, 0, dev).weight
           for i in range(copies(n * k // 2))]  # fmt: skip
    a8, s8 = mx_gemm.fp8_quant(x)
    a8, s8 = a8.unsqueeze(0), s8.unsqueeze(0)
    bf = torch.bfloat16

    def w4a16(p: repack.Prepared, cfg: Any) -> object:
        return gemm.w4a16_gemm(xr, rs, p, bf, None, cfg)

    def w4a8(p: repack.Prepared, cfg: Any) -> object:
        return gemm.w4a8_gemm(q, asc, qrs, p, bf, None, cfg)

    def mx(w: mx_repack.MxWeight, cfg: Any) -> object:
        return mx_gemm.mx_gemm(a8, s8, w, bounds, bf, None, cfg)

    runs: dict[str, tuple[Callable[..., object], list[object]]] = {
        "w4a16": (w4a16, list(preps)), "w4a8-fp8": (w4a8, list(preps)),
        "mxfp4-fp8": (mx, list(mxw)),
    }  # fmt: skip
    picked: dict[str, Any] = {
        "w4a16": gemm.pick_config(m, n, k, G, bounds, sms),
        "w4a8-fp8": gemm.pick_config_a8(m, n, k, G, bounds, sms),
        "mxfp4-fp8": mx_gemm.pick_config(m, n, k, bounds, 0, sms),
    }
    row: dict[str, object] = {"shape": name, "n": n, "k": k, "m": m}
    fns = [functools.partial(torch.matmul, x, d) for d in dense]
    row["cublas_bf16"] = round(mx_bench._graph_time(fns), 2)  # type: ignore[arg-type]
    for kernel in KERNELS:
        fn, ws = runs[kernel]
        times: dict[str, float] = {}
        cands = [picked[kernel], *configs(kernel, m, n, k, sms)]
        for cfg in dict.fromkeys(cands):
            if time.monotonic() > deadline:
                break
            try:
                us = mx_bench._graph_time([functools.partial(fn, w, cfg) for w in ws])
            except Exception as e:  # a config the kernel cannot take (resources): recorded
                times[short(cfg)] = float("nan")
                print(f"  {kernel} {short(cfg)}: {type(e).__name__} {str(e)[:80]}", flush=True)
                continue
            times[short(cfg)] = round(us, 2)
        best = min((v, c) for c, v in times.items() if v == v) if times else (float("nan"), "")
        row[kernel] = {"picked": short(picked[kernel]), "times": times, "best": best[1],
                       "best_us": best[0]}  # fmt: skip
        cub = float(row["cublas_bf16"])  # type: ignore[arg-type]
        pk = times.get(short(picked[kernel]), float("nan"))
        print(f"{name} M={m} {kernel}: picked {short(picked[kernel])} {pk} us "
              f"(x{cub / pk:.2f} cuBLAS), best {best[1]} {best[0]} us (x{cub / best[0]:.2f}), "
              f"cuBLAS {cub} us", flush=True)  # fmt: skip
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out")
    ap.add_argument("--ms", default="64,32,128,192,24,48,96")
    ap.add_argument("--shapes", default="qkv,gate_up,down,o_proj,in_proj")
    ap.add_argument("--budget-s", type=float, default=400)
    args = ap.parse_args()
    deadline = time.monotonic() + args.budget_s
    rows: list[dict[str, object]] = []
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for m in (int(v) for v in args.ms.split(",")):
        for name in args.shapes.split(","):
            if time.monotonic() > deadline:
                break
            _, n, k, sizes = next(s for s in SHAPES if s[0] == name)
            rows.append(_cell(name, n, k, sizes, m, deadline))
            torch.cuda.synchronize()
            with open(args.out, "w") as f:
                json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
