"""The MXFP4 / MXFP4-PARO router: `mx_linear`, the one M-band dispatch of the MXFP4 family (PATHS),
and the activation mode the GEMM takes in the bands between the decode GEMVs and prefill.

The bands (NVIDIA): the mma GEMV (`mx_gemv_mma.mma_ok`, M <= MMA_MAX_M; a few rows more in
chunks, `chunks_ok`), else the FMA GEMV (`mx_gemv.gemv_ok`); bf16 fp8 layers from
`mx_gemm.W8_MIN_M` rows (rotated ones by plane width, `W8_ROT_PLANES`) on the 8-bit vendor GEMM;
from `mx_gemm.DEQUANT_MIN_M` rows dequant + vendor GEMM; the tile GEMM between (`served_act`).
"""

from __future__ import annotations

import torch

from .._contract import require
from . import dequant, gemv_mma, launch, mx_gemm, mx_gemv, mx_gemv_mma, mx_repack, prologue
from .mx_gemm import dequant_ok, narrowest_plane, w8_ok
from .mx_repack import ActMode, MxWeight


def _mma_prologue(prep: mx_repack.Prepared, x: torch.Tensor, rh: torch.Tensor,
                  rl: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """MXFP4-PARO's paired fp16 activations (pair shift 0) for the mma GEMV, by the int4 mma
    GEMV's rule (`gemv_mma.mma_blocks`): the Givens records, or the sliced blocks (also
    without records)."""

    m, k = x.shape
    blocks = gemv_mma.mma_blocks(m, prep.weight.n * k)
    if prep.gv_idx is not None and prep.gv_coef is not None and not blocks:
        return prologue.rotate_givens_paired(x, prep.gv_idx, prep.gv_coef, prep.group_size, 0)
    return prologue.rotate_slices(x.to(rh.dtype), rh, rl, prep.group_size, paired=True,
                                   pair_shift=0)[0]  # fmt: skip


PATHS = ("mma", "chunks", "gemv", "gemm", "dequant", "w8")


def mx_linear(
    prep: mx_repack.Prepared, x: torch.Tensor, bias: torch.Tensor | None = None,
    act: mx_repack.ActMode = "fp8", path: str | None = None,
) -> torch.Tensor:  # fmt: skip
    """y [M, N] in x.dtype = act_quant(rot(x)) W^T (+ bias) for x [M, K] bf16/fp16.

    Decode rows take 16-bit activations, either `act`: the mma GEMV (`mx_gemv_mma.mma_ok`;
    MXFP4-PARO on the paired prologue, NVFP4 -> MXFP4 on x; a few rows more in MMA_MAX_M-row
    chunks, `chunks_ok`, each chunk its own call), else the FMA GEMV (`gemv_ok`),
    and a few more rows the GEMM on them (`served_act`); prefill from DEQUANT_MIN_M rows the
    layer dequantized (`mx_dequant`, the rotation folded in) + the vendor GEMM on x itself;
    W8 (bf16 fp8 layers from W8_MIN_M rows, rotated ones by plane width, `W8_ROT_PLANES`):
    `w8_linear`, the 8-bit vendor GEMM.
    `path` ("mma" | "chunks" | "gemv" | "gemm" | "dequant" | "w8") forces the kernel and `act`
    the GEMM's activations (the bench's forced paths)."""

    require(path in (None, *PATHS), "path", ", ".join(PATHS), path)
    hip = launch.is_hip()
    rh, rl, g = prep.rot_hi, prep.rot_lo, prep.group_size
    m = x.shape[0]
    n, bounds = prep.weight.n, prep.bounds
    chunks = path == "chunks" or (path is None and mx_gemv_mma.chunks_ok(m, n, bounds, hip))
    if chunks and mx_gemv_mma.CHUNKS_ONE_LAUNCH:
        path = "mma"
    elif chunks:
        step = mx_gemv_mma.MMA_MAX_M
        return torch.cat([mx_linear(prep, x[i : i + step], bias, act) for i in range(0, m, step)])
    if path == "mma" or (path is None and mx_gemv_mma.mma_ok(m, n, bounds, hip)):
        if rh is not None and rl is not None:  # MXFP4-PARO: the int4 mma GEMV's prologues
            a = _mma_prologue(prep, x, rh, rl)
            return mx_gemv_mma.mx_gemv_mma(a, prep.weight, prep.bounds, x.dtype, bias)
        return mx_gemv_mma.mx_gemv_mma(x.contiguous().unsqueeze(0), prep.weight, prep.bounds,
                                          x.dtype, bias, paired=False)  # fmt: skip
    if path == "gemv" or (path is None and mx_gemv.gemv_ok(m, hip)):
        if rh is not None and rl is not None and prologue.prologue_slice(hip):
            # MXFP4-PARO: the int4 decode's sliced prologue (fp16 out), as the int4 GEMVs take it
            a = prologue.rotate_slices(x.to(rh.dtype), rh, rl, g, f16=True)[0]
        else:
            (a,) = mx_gemm.activations(prep, x, "a16")
        return mx_gemv.mx_gemv(a, prep.weight, prep.bounds, x.dtype, bias)
    rot_plane = mx_gemm.narrowest_plane(prep.weight.n, prep.bounds) if rh is not None else 0
    if path == "w8" or (
        path is None and mx_gemm.w8_ok(m, act, hip, x.dtype, prep.weight, rot_plane)
    ):
        return mx_gemm.w8_linear(prep, x, bias)
    if path == "dequant" or (path is None and mx_gemm.dequant_ok(m, hip)):
        return dequant.dequant_linear(x, mx_gemm.mx_dequant(prep, x.dtype).t(), bias)
    if path is None:
        act = served_act(m, act, hip, prep.weight.n, prep.bounds,
                                          rot_plane > 0, prep.weight, x.dtype)  # fmt: skip
    ops = mx_gemm.activations(prep, x, act)
    a, a_scale = ops[0], (ops[1] if len(ops) > 1 else None)
    return mx_gemm.mx_gemm(a, a_scale, prep.weight, prep.bounds, x.dtype, bias)


def served_act(m: int, act: ActMode, hip: bool, n: int = 0, bounds: tuple[int, ...] = (),
               rot: bool = False, w: MxWeight | None = None,
               dtype: torch.dtype = torch.bfloat16) -> ActMode:  # fmt: skip
    """The activations an M-row call of an `act` layer (N columns, plane `bounds`) is served
    on: decode rows take 16-bit ones on NVIDIA, where it was measured (the mma GEMV's to
    MMA_MAX_M where it takes the layer, and its chunks to MMA_CHUNK_MAX_M, the FMA GEMV's, or
    the GEMM's A16 up to A16_MAX_M), and so do prefill rows on the dequant path
    (`mx_gemm.dequant_ok`: the vendor GEMM on x itself) unless the 8-bit vendor GEMM takes them
    (`mx_gemm.w8_ok`, for a bf16 layer in the e4m3 fold; rot: the layer is rotated,
    MXFP4-PARO; w: its weight, None to take the fold as given; dtype: x's)."""
    mma = mx_gemv_mma.mma_ok(m, n, bounds, hip) or mx_gemv_mma.chunks_ok(m, n, bounds, hip)
    plane = narrowest_plane(n, bounds) if rot and n else 0
    dq = dequant_ok(m, hip) and not w8_ok(m, act, hip, dtype, w, plane)
    a16 = mma or mx_gemv.gemv_ok(m, hip) or (not hip and m <= mx_gemv.A16_MAX_M) or dq
    return "a16" if a16 else act
