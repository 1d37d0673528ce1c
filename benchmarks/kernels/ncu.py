"""One op on one cell between cudaProfilerStart/Stop, for Nsight Compute (a kernel's before/after).

    ncu --clock-control none --profile-from-start off --csv --metrics ... \
        python -m benchmarks.kernels.ncu gate_up 1 gemv|gemv-prologue|gemv3|gemv-mma|dequant \
            |dequant-kn [bf16|int8]
        python -m benchmarks.kernels.ncu gate_up 1 mx | mx-old MODULE | int5 | int5-old MODULE

`mx`: the MXFP4 op as served (`mx_route.mx_linear`, a W4A8 layer: the decode GEMV at M <= 2);
`mx-old MODULE`: a previous tree's GEMV kernel in MODULE at the same config
(`benchmarks.kernels.mx_decode --old`). `int5`: the int5 op as served (`route.linear_a8`, the
decode GEMV at M <= 16); `int5-old MODULE`: the same on a previous tree's `gemv3_w4a16_kernel`
(`benchmarks.kernels.mx_decode --int5-old`).

The op runs once outside the profiled range (compiles, fills caches of the launcher), then once
inside it, on random weights of the bench's layout.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch

from benchmarks.kernels.common import SHAPES, mx_gemv_old, random_prep, with_givens


def main(argv: list[str]) -> None:
    """argv: shape M path [act] -> the profiled call."""
    import argparse

    from paro_kernels.triton import route

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shape", choices=[s[0] for s in SHAPES])
    ap.add_argument("m", type=int)
    ap.add_argument(
        "path", help="gemv|gemv-prologue|gemv3|gemv-mma|dequant|dequant-kn|mx|mx-old|int5|int5-old"
    )
    ap.add_argument("act", nargs="?", default="bf16", help="bf16|int8|fp8, or the -old MODULE")
    args = ap.parse_args(argv)
    name, m, path, act = args.shape, args.m, args.path, args.act
    _, n, k, sizes = next(s for s in SHAPES if s[0] == name)
    dev = torch.device("cuda")
    if path.startswith("mx"):
        _profile(_mx_call(n, k, m, path, act, dev))
        return
    if path.startswith("int5"):
        _profile(_int5_call(n, k, m, sizes, path, act, dev))
        return
    import dataclasses

    prep = random_prep(n, k, sizes, 4, dev)
    # as the plugin prepares a layer: Givens tables and W4A8 channel maxima
    prep = dataclasses.replace(with_givens(prep, k, len(sizes), dev),
                               w8_amax=torch.rand(n, device=dev) + 0.5)  # fmt: skip
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    # gemv-prologue: the layer without the tables (the prologue GEMV)
    plain = dataclasses.replace(prep, gv_idx=None, gv_coef=None)
    served = plain if path == "gemv-prologue" else prep
    served_path = "gemv" if path == "gemv-prologue" else path

    def call() -> object:
        if path == "gemv3":  # the matrix-unit decode GEMV (sliced fp16 prologue + GEMV)
            from paro_kernels.triton import gemv_dot

            return gemv_dot.gemv3_linear(prep, x)
        if path == "dequant-kn":  # the dequant path with W' stored [K, N] (served before)
            from paro_kernels.triton import dequant

            return dequant.dequant_linear(x, dequant.dequant_weights(prep, x.dtype, nk=False), None)
        if act != "bf16":
            return route.linear_a8(prep, x, None, act, "group", False)
        return route.linear(served, x, path=served_path)

    _profile(call)


def _int5_call(n: int, k: int, m: int, sizes: tuple[int, ...], path: str, module: str,
               dev: torch.device) -> Callable[[], object]:  # fmt: skip
    """int5 (W5A8 I8 PG ZPE) as served (`route.linear_a8`: the decode GEMV at M <= 16), or on
    MODULE's `gemv3_w4a16_kernel` (`int5-old`, `benchmarks.kernels.mx_decode --int5-old`)."""
    from paro_kernels.triton import gemv_dot, route

    prep = with_givens(random_prep(n, k, sizes, 5, dev), k, len(sizes), dev)
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    if path == "int5-old":  # this one-op process keeps MODULE's kernel to its end
        import importlib

        # gemv_dot holds the kernel by value: replace it there
        gemv_dot.gemv3_w4a16_kernel = importlib.import_module(module).gemv3_w4a16_kernel
    return lambda: route.linear_a8(prep, x, None, "int8", "group", True)


def _profile(call: Callable[[], object]) -> None:
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def _mx_call(n: int, k: int, m: int, path: str, module: str,
             dev: torch.device) -> Callable[[], object]:  # fmt: skip
    import functools
    import importlib

    from paro_kernels.triton import launch, mx_gemv, mx_repack, mx_route

    prep = mx_repack.prepare(*mx_repack.random_checkpoint(n, k), None, 0, dev)
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    if path == "mx":
        return functools.partial(mx_route.mx_linear, prep, x, None, "fp8")
    cfg = mx_gemv.gemv_config(m, n, k, (), launch.sm_count(dev))
    kern = importlib.import_module(module).mx_gemv_kernel
    return functools.partial(mx_gemv_old, kern, prep, x[None], cfg)


if __name__ == "__main__":
    main(sys.argv[1:])
