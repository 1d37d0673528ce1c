"""The MXFP4 mma GEMV's PTX (`mx_gemv_mma_kernels.mx_mma_asm`) run on the CPU for a whole warp,
instruction by instruction, mma.sync included, against an fp64 product.

The GPU tests check the kernel end to end on the H200; this pins, before any GPU run, the lane
mapping (which words, activation rows and scale bytes each lane feeds to which fragment), the
e2m1 unpack on every code and sign, and the per-block scaling: a wrong shift, selector, pairing
or fragment slot changes the sums. The warp runs in lockstep: each instruction for the 32 lanes,
each `mma.sync.m16n8k16` gathering its A / B / C fragments from all lanes (PTX ISA fragment
layout) and multiplying in fp64.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from paro_kernels.triton.mx_gemv_mma_kernels import ACT_BF16, ACT_F16, ACT_PAIRED, mx_mma_asm
from test_mma_unpack_cpu import M32, _lop3, _pair, _prmt

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def _f32(v: int) -> float:
    return float(np.array([v], dtype=np.uint32).view(np.float32)[0])


def _bits32(f: float) -> int:
    return int(np.array([f], dtype=np.float32).view(np.uint32)[0])


def run_warp(asm: str, regs: list[dict[str, int]]) -> list[dict[str, int]]:
    """Execute `asm` for the 32 lanes (registers as 32-bit patterns, fp32 ones too)."""
    envs = [dict(r) for r in regs]

    def val(env: dict[str, int], t: str) -> int:
        t = t.strip()
        if t in env:
            return env[t]
        return _bits32(0.0) if t == "0f00000000" else int(t, 0)

    for line in asm.splitlines():
        line = line.strip().rstrip(";")
        if not line or line[0] in "{}" or line.startswith(".reg"):
            continue
        op, rest = line.split(None, 1)
        if op.startswith("mma.sync"):
            d, a, b, c = (
                [r.strip() for r in grp.split(",")] for grp in re.findall(r"\{([^}]*)\}", rest)
            )
            _mma(envs, d, a, b, c, val)
            continue
        dst, *args = [x.strip() for x in rest.split(",")]
        for env in envs:
            v = [val(env, x) for x in args]
            if op == "lop3.b32":
                env[dst] = _lop3(v[0], v[1], v[2], v[3])
            elif op == "shr.u32":
                env[dst] = v[0] >> v[1]
            elif op == "shl.b32":
                env[dst] = (v[0] << v[1]) & M32
            elif op == "and.b32":
                env[dst] = v[0] & v[1]
            elif op == "prmt.b32":
                env[dst] = _prmt(v[0], v[1], v[2])
            elif op in ("mov.b32", "mov.f32"):
                env[dst] = v[0]
            elif op == "cvt.rn.satfinite.f16x2.f32":  # d = (fp16(a) << 16) | fp16(b)
                h = np.clip([_f32(v[1]), _f32(v[0])], -65504, 65504).astype(np.float16)
                env[dst] = int(h.view(np.uint16)[0]) | (int(h.view(np.uint16)[1]) << 16)
            elif op == "fma.rn.f32":
                r = np.float32(_f32(v[0])) * np.float32(_f32(v[1])) + np.float32(_f32(v[2]))
                env[dst] = _bits32(float(r))
            else:
                raise AssertionError(f"instruction not modelled: {op}")
    return envs


def _mma(envs, d, a, b, c, val) -> None:  # type: ignore[no-untyped-def]
    """D = A B + C for m16n8k16 (A row-major 16 x 16 fp16, B 16 x 8, C / D fp32)."""
    am = np.zeros((16, 16))
    bm = np.zeros((16, 8))
    cm = np.zeros((16, 8))
    for lane, env in enumerate(envs):
        gid, tig = lane // 4, lane % 4
        for i, (row, k0) in enumerate(((gid, 0), (gid + 8, 0), (gid, 8), (gid + 8, 8))):
            am[row, k0 + 2 * tig : k0 + 2 * tig + 2] = _pair(val(env, a[i])).astype(float)
        for i, k0 in enumerate((0, 8)):
            bm[k0 + 2 * tig : k0 + 2 * tig + 2, gid] = _pair(val(env, b[i])).astype(float)
        for i, (row, col) in enumerate(((gid, 0), (gid, 1), (gid + 8, 0), (gid + 8, 1))):
            cm[row, 2 * tig + col] = _f32(val(env, c[i]))
    dm = am @ bm + cm
    for lane, env in enumerate(envs):
        gid, tig = lane // 4, lane % 4
        for i, (row, col) in enumerate(((gid, 0), (gid, 1), (gid + 8, 0), (gid + 8, 1))):
            env[d[i]] = _bits32(float(dm[row, 2 * tig + col]))


def _paired_words(x: np.ndarray) -> np.ndarray:
    """fp16 activations [rows, 64] -> int32 words [rows, 8, 4] of the paired layout (row r of
    8 channels: word j = channels (8 r + j, 8 r + j + 4))."""
    h = x.astype(np.float16).reshape(x.shape[0], 8, 2, 4).transpose(0, 1, 3, 2)
    return np.ascontiguousarray(h).view(np.uint32)[..., 0].reshape(x.shape[0], 8, 4)


def _plain_words(x: np.ndarray, dtype: type) -> np.ndarray:
    """Activations [rows, 64] as the plain rows' int32 words [rows, 8, 4] (row r of 8 channels:
    word i = channels (8 r + 2 i, 8 r + 2 i + 1)), bf16 or fp16."""
    if dtype is np.float16:
        h = x.astype(np.float16).view(np.uint16)
    else:  # bf16: the top half of the fp32 bits (x is bf16-exact here)
        h = (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return np.ascontiguousarray(h).view(np.uint32).reshape(x.shape[0], 8, 4)


@pytest.mark.parametrize("mode", [ACT_PAIRED, ACT_BF16, ACT_F16], ids=["paired", "bf16", "f16"])
@pytest.mark.parametrize("tiles", [1, 2, 4])
def test_mx_mma_warp_matches_fp64(tiles: int, mode: int) -> None:
    # One warp, one block pair: 8 column quads (32 columns), 8 tiles-worth of activation rows.
    # Codes cover every value and sign on every column; scales span e8m0 codes 100..140 (and 0,
    # which flushes the block to zero); running sums come in nonzero. The activations come
    # paired, or as plain bf16 / fp16 rows the asm pairs (bf16-exact values: fp16 holds them).
    asm = mx_mma_asm(tiles, mode)
    base = 8 * tiles
    rng = np.random.default_rng(7 + tiles)
    for trial in range(6):
        codes = rng.integers(0, 16, size=(32, 64))
        codes[:, trial] = np.arange(32) % 16
        e = rng.integers(100, 141, size=(32, 2))
        e[trial % 32, trial % 2] = 0
        x = rng.standard_normal((8 * tiles, 64)).astype(np.float32)
        x = ((x.view(np.uint32) >> 16) << 16).view(np.float32)  # bf16-exact (truncated)
        acc = rng.standard_normal((8 * tiles, 32)).astype(np.float32)
        # the repacked words: word w of a column = byte b: (code 4 w + b) | (code 32 + 4 w + b) << 4
        byt = codes[:, :32] | (codes[:, 32:] << 4)
        words = byt.reshape(32, 8, 4).astype(np.uint32)
        words = words[..., 0] | words[..., 1] << 8 | words[..., 2] << 16 | words[..., 3] << 24
        if mode == ACT_PAIRED:
            xw = _paired_words(x)
        else:
            xw = _plain_words(x, np.float16 if mode == ACT_F16 else np.float32)
        regs = []
        for lane in range(32):
            gid, tig = lane // 4, lane % 4
            r: dict[str, int] = {}
            for c in range(4):
                col = 4 * gid + c
                r[f"${base + 2 * c}"] = int(words[col, 2 * tig])
                r[f"${base + 2 * c + 1}"] = int(words[col, 2 * tig + 1])
            for blk in range(2):
                r[f"${base + 8 + blk}"] = sum(int(e[4 * gid + c, blk]) << (8 * c) for c in range(4))
            for t in range(tiles):
                for j in range(4):
                    r[f"${base + 10 + 8 * t + j}"] = int(xw[8 * t + gid, tig, j])
                    r[f"${base + 14 + 8 * t + j}"] = int(xw[8 * t + gid, 4 + tig, j])
                for h in range(2):
                    for c in range(4):
                        row = 8 * t + 2 * tig + h
                        r[f"${base + 10 + 8 * tiles + 8 * t + 4 * h + c}"] = _bits32(
                            float(acc[row, 4 * gid + c])
                        )
            regs.append(r)
        out = run_warp(asm, regs)
        w = E2M1[codes] * 2.0**-14
        s = np.where(e == 0, 0.0, 2.0 ** (e.astype(float) - 127))
        want = acc.astype(float) + x.astype(float)[:, :32] @ (w[:, :32] * s[:, :1]).T
        want += x.astype(float)[:, 32:] @ (w[:, 32:] * s[:, 1:]).T
        for lane in range(32):
            gid, tig = lane // 4, lane % 4
            for t in range(tiles):
                for h in range(2):
                    for c in range(4):
                        got = _f32(out[lane][f"${8 * t + 4 * h + c}"])
                        ref = want[8 * t + 2 * tig + h, 4 * gid + c]
                        assert got == pytest.approx(ref, rel=1e-5, abs=1e-6), (trial, lane, t, h, c)
