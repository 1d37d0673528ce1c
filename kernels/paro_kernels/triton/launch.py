"""Launch helpers every Triton path shares: configs, band constants, tile and grid arithmetic,
SM count, HIP / interpreter detection, the shared scratch buffers and PDL availability.

Scratch buffers (module-level, per device, grow-only): the GEMVs' fp32 split-K sums and int32
tickets, which every launch leaves zeroed, and the dequant paths' W' scratch. One stream at a
time may use them (vLLM runs one layer after another on one stream).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .._contract import require
from . import launch_kernels

DECODE_MAX_M = 16


MID_MAX_M = 256  # up to here 64-row tiles with split-K fill the SMs (above: 128-row tiles)


GROUP_SIZES = (64, 128)


ACT_DTYPES = (torch.bfloat16, torch.float16)


ACT_FORMATS = ("fp8", "int8")


ACT_SCALES = ("group", "token")


BITS = (4, 5)


CODE_DTYPES = {"fp8": torch.float8_e4m3fn, "int8": torch.int8}


@dataclass(frozen=True)
class Config:
    """One launch configuration of the W4A16 GEMM."""

    block_m: int
    block_n: int
    split_k: int
    num_warps: int
    num_stages: int
    group_m: int = 8
    rowsum: bool = False  # the zero point as the row-sum correction (fewer ALU ops per weight)
    planes: bool = False  # G = 128 only: 8 K=16 dots per group on the packed words, no reshape


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors (CUs) of device; the H200's 132 where there is no GPU (AOT)."""
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132


def fit_block_n(bn_max: int, align: int) -> int:
    """Widest tile <= bn_max dividing every partition boundary (blocks never straddle one)."""
    block_n = next((b for b in (256, 128, 64, 32, 16) if b <= bn_max and align % b == 0), 0)
    require(block_n > 0, "partition boundaries", "multiples of 16", align)
    return block_n


def is_hip() -> bool:
    return torch.version.hip is not None


def interpreted() -> bool:
    """Kernels run under the Triton interpreter (TRITON_INTERPRET=1): no inline assembly."""
    import os

    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def triton_cdiv(a: int, b: int) -> int:
    """Ceiling division for grid sizes."""
    return -(-a // b)


def gemm_out_grid(
    m: int,
    n: int,
    cfg: Any,
    out_dtype: torch.dtype,
    device: torch.device,
    workspace: torch.Tensor | None = None,
) -> tuple[torch.Tensor, tuple[int, int]]:
    """The GEMMs' output and grid (cfg: any launch config with block_m, block_n, split_k).

    With split-K the splits add fp32 atomically into a zeroed workspace (cast afterwards; the
    caller's, e.g. zeroed by the Givens prologue, or a fresh one), else each tile stores out_dtype
    once; one program per tile per split (the kernels' `gemm_tile` maps it).
    """
    if cfg.split_k > 1:
        out = workspace
        if out is None:
            out = torch.zeros(m, n, dtype=torch.float32, device=device)
    else:
        out = torch.empty(m, n, dtype=out_dtype, device=device)
    return out, (triton_cdiv(m, cfg.block_m) * triton_cdiv(n, cfg.block_n), cfg.split_k)


@dataclass(frozen=True)
class GemvConfig:
    """One launch configuration of the GEMV."""

    block_m: int
    block_n: int
    split_k: int
    num_warps: int
    num_stages: int = 3
    kw: int = 16  # gemv2: int32 word rows per chunk


_WS: dict[tuple[str, str], torch.Tensor] = {}


# A CUDA graph keeps the addresses of the buffers its kernels used. A scratch buffer handed out
# while a graph was being captured is never freed when it grows or changes dtype: it moves here,
# so the graphs captured on it replay into live memory (vLLM captures one batch size after
# another, with eager warm-up calls between them, and a route first taken at a later size may
# grow a buffer an earlier graph uses).
_CAPTURED: set[tuple[str, str]] = set()


_RETIRED: list[torch.Tensor] = []


def capturing(device: torch.device) -> bool:
    """Whether a CUDA graph is being captured on the current stream (never on a CPU build)."""
    cuda = device.type == "cuda" and torch.cuda.is_available()
    return cuda and torch.cuda.is_current_stream_capturing()


def scratch(kind: str, numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A zeroed grow-only buffer of at least `numel` elements, one per (kind, device); one that
    a graph capture used is kept alive (`_RETIRED`) when it is replaced."""
    key = (kind, str(device))
    buf = _WS.get(key)
    if buf is None or buf.numel() < numel or buf.dtype != dtype:
        if buf is not None and key in _CAPTURED:
            _RETIRED.append(buf)
            _CAPTURED.discard(key)
        buf = torch.zeros(max(numel, 1 << 16), dtype=dtype, device=device)
        _WS[key] = buf
    if capturing(device):
        _CAPTURED.add(key)
    return buf


def gemv_buffers(
    m: int, n: int, cfg: GemvConfig, dtype: torch.dtype, device: torch.device, chunks: int = 1
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """(out [M, N], split-K fp32 workspace, tickets (a column tile's per row chunk), column
    tiles) of one GEMV launch; without split-K the workspace and tickets are unused (out stands
    in for them)."""
    out = torch.empty(m, n, dtype=dtype, device=device)
    tiles = -(-n // cfg.block_n)
    if cfg.split_k == 1:
        return out, out, out, tiles
    ws = scratch("gemv_ws", m * n, torch.float32, device)
    return out, ws, scratch("gemv_cnt", tiles * chunks, torch.int32, device), tiles


# H200 2026-12-02: the GEMV launched programmatically dependent on its prologue (PDL, sm_90): the
# prologue lets it launch at once, the GEMV prefetches its word rows into L2 (`prefetch_l2`) and
# waits (`gdc_wait`) only before reading the prologue's output, so the weight stream could
# overlap the prologue. Run 3 (H200 2026-12-02, sliced prologue + FMA GEMV as served, same run,
# off / on): M = 1 qkv 17.6 / 18.0 us, o_proj 10.8 / 10.0, gate_up 29.4 / 29.1, down 19.9 /
# 18.4, in_proj 17.6 / 17.7; M = 2 23.4 / 21.6, 12.4 / 11.8, 36.8 / 38.7, 23.0 / 23.2, 22.3 /
# 20.6; the matrix-unit GEMV at M = 16 -1.7 to +1.6 us: within the run's noise either way, so
# it stays off (and the kernel cache built on CPU needs no second specialization).
GEMV_PDL = False


def pdl_ok(hip: bool) -> bool:
    """Programmatic dependent launch available: NVIDIA sm_90+, a Triton with GDC, compiled code
    (not the interpreter)."""

    if hip or launch_kernels.gdc_wait is None or interpreted():
        return False
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9
