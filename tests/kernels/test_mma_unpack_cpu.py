"""The mma GEMV's PTX unpack (`gemv_mma_kernels.mma_word_asm`) run on the CPU, instruction by
instruction, against the codes it must produce.

The GPU tests check the kernel end to end; this pins the bit placement of the unpack itself
(the LOP3 magic numbers, the int5 fifth-bit spread and the byte each lane selects) on every code
and zero, where a wrong bit would otherwise surface only on the H200. A small interpreter runs the
asm's integer and packed-fp16 instructions for one lane; at each `mma.sync` it records the A
operand (the unpacked weights) instead of multiplying.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from paro_kernels.triton.gemv_mma_kernels import mma_word_asm

M32 = 0xFFFFFFFF


def _pair(v: int) -> np.ndarray:
    return np.array([v & 0xFFFF, v >> 16], dtype=np.uint16).view(np.float16)


def _bits(a: np.ndarray) -> int:
    u = np.asarray(a, dtype=np.float16).view(np.uint16)
    return int(u[0]) | (int(u[1]) << 16)


def _lop3(a: int, b: int, c: int, lut: int) -> int:
    out = 0
    for i in range(32):
        idx = (((a >> i) & 1) << 2) | (((b >> i) & 1) << 1) | ((c >> i) & 1)
        out |= ((lut >> idx) & 1) << i
    return out


def _prmt(a: int, b: int, sel: int) -> int:
    src = a.to_bytes(4, "little") + b.to_bytes(4, "little")
    assert not sel & 0x8888, "sign-replicate mode is not used"
    return int.from_bytes(bytes(src[(sel >> (4 * i)) & 7] for i in range(4)), "little")


def run_lane(asm: str, regs: dict[str, int]) -> list[list[int]]:
    """Execute `asm` for one lane with its operand registers `regs` ($n -> value); the A
    operands (4 registers) of each mma.sync, in order."""
    env = dict(regs)
    a_ops = []

    def val(t: str) -> int:
        t = t.strip()
        return env[t] if t in env else int(t, 0)

    for line in asm.splitlines():
        line = line.strip().rstrip(";")
        if not line or line[0] in "{}." or line.startswith(".reg"):
            continue
        op, rest = line.split(None, 1)
        if op.startswith("mma.sync"):
            a_ops.append([val(r) for r in re.findall(r"\{([^}]*)\}", rest)[1].split(",")])
            continue
        d, *args = [a.strip() for a in rest.split(",")]
        if op == "lop3.b32":
            env[d] = _lop3(val(args[0]), val(args[1]), val(args[2]), int(args[3], 0))
        elif op == "shr.u32":
            env[d] = val(args[0]) >> val(args[1])
        elif op == "shl.b32":
            env[d] = (val(args[0]) << val(args[1])) & M32
        elif op == "mul.lo.u32":
            env[d] = (val(args[0]) * val(args[1])) & M32
        elif op == "prmt.b32":
            env[d] = _prmt(val(args[0]), val(args[1]), val(args[2]))
        elif op == "sub.f16x2":
            diff = _pair(val(args[0])).astype(np.float32) - _pair(val(args[1])).astype(np.float32)
            env[d] = _bits(diff)
        else:
            raise AssertionError(f"instruction not modelled: {op}")
    return a_ops


@pytest.mark.parametrize("hi", [False, True], ids=["int4", "int5"])
@pytest.mark.parametrize("tiles", [1, 2, 4])
def test_mma_unpack_every_code_and_zero(hi: bool, tiles: int) -> None:
    # Per column quad: 4 words (8 codes each), the zero pairs as the kernel builds them
    # ((1024 + z) x 2 and (64 + z) x 2 in fp16 bits), with int5 each column's fifth-bit word
    # whose byte tig is this word row's (the other bytes random: the lane must pick its own)
    # and the prmt selector 0x4440 + tig. The A operands of the 4 mmas a tile must be the exact
    # c - z of the pairs (0, 4), (1, 5) (first mma of a column pair) and (2, 6), (3, 7).
    asm = mma_word_asm(tiles, hi)
    base = 8 * tiles
    top = 32 if hi else 16
    rng = np.random.default_rng(tiles + 2 * hi)
    for trial in range(400):
        tig = trial % 4
        codes = rng.integers(0, top, size=(4, 8))
        codes[:, trial % 8] = trial % top  # every code value in every plane
        zeros = (np.arange(4) + trial) % top  # every zero on every column
        regs = {f"${base + 16}": 0x4440 + tig}
        for c in range(4):
            regs[f"${base + c}"] = sum(int(codes[c, s] & 15) << (4 * s) for s in range(8))
            regs[f"${base + 4 + c}"] = ((int(zeros[c]) | 0x6400) * 65537) & M32
            regs[f"${base + 8 + c}"] = (((int(zeros[c]) << 4) | 0x5400) * 65537) & M32
            if hi:
                byte = sum(int(codes[c, s] >> 4) << s for s in range(8))
                other = rng.integers(0, 256, size=4).tolist()
                other[tig] = byte
                regs[f"${base + 12 + c}"] = int.from_bytes(bytes(other), "little")
        a_ops = run_lane(asm, regs)
        assert len(a_ops) == 4 * tiles
        for half in range(2):  # columns (0, 1), then (2, 3)
            for t in range(tiles):  # every tile's mmas take the same unpacked weights
                for k in range(2):  # pairs (0, 4), (1, 5); then (2, 6), (3, 7)
                    got = a_ops[2 * tiles * half + 2 * t + k]
                    want = [
                        (codes[col, [p, p + 4]] - zeros[col]).tolist()
                        for p in (2 * k, 2 * k + 1)
                        for col in (2 * half, 2 * half + 1)
                    ]
                    have = [_pair(r).astype(int).tolist() for r in got]
                    assert have == want, (trial, half, t, k)
