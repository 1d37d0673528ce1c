"""Bit-exact codecs for the formats ParoQuant checkpoints and kernels use (pure torch).

AWQ int4 packing (AutoAWQ / vLLM `awq_triton.py` convention): a 32-bit word holds 8 consecutive
logical columns; nibble slot `i` (bits 4i..4i+3) holds logical column `AWQ_PACK_ORDER[i]` of the
8-column block, so logical column `j` is read from slot `AWQ_REVERSE_ORDER[j]`.

int5 bit-planes: the low four bits are AWQ-packed exactly like int4 (`qweight`, `qzeros`); the fifth
bit lives in a separate plane (`qweight_hi`, `qzeros_hi`) of shape [rows, cols/32] int32 where bit
`b` of word `w` is the fifth bit of logical column `32*w + b` (plain order, no AWQ shuffle).

Minifloats (OCP MX / OCP FP8): e2m1 (FP4), e8m0 (power-of-two scale) and e4m3fn (FP8) encode and
decode in software, so tests and CPU paths know exactly which code every value becomes.
"""

from __future__ import annotations

from typing import Literal

import torch

from ._contract import check_multiple, check_tensor, require

AWQ_PACK_ORDER: tuple[int, ...] = (0, 2, 4, 6, 1, 3, 5, 7)
AWQ_REVERSE_ORDER: tuple[int, ...] = (0, 4, 1, 5, 2, 6, 3, 7)

_INT_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _to_int32_bits(words: torch.Tensor) -> torch.Tensor:
    """Reinterpret uint32 values held in int64 as int32 (two's complement), as checkpoints store."""
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def _as_uint32(words: torch.Tensor) -> torch.Tensor:
    return words.to(torch.int64) & 0xFFFFFFFF


# --------------------------------------------------------------------------- AWQ int4


def pack_awq(codes: torch.Tensor, arg: str = "codes") -> torch.Tensor:
    """Pack [R, C] integer codes 0..15 into AWQ words [R, C/8] int32 (slot i = column ORDER[i])."""
    check_tensor(codes, arg, dtype=_INT_DTYPES, ndim=2)
    check_multiple(codes.shape[1], 8, f"{arg}.shape[1]")
    c = codes.to(torch.int64)
    require(bool(((c >= 0) & (c <= 15)).all()), f"{arg} values", "0..15", _range(c))
    blocks = c.view(c.shape[0], -1, 8)[:, :, list(AWQ_PACK_ORDER)]
    shifts = torch.arange(8, dtype=torch.int64) * 4
    return _to_int32_bits((blocks << shifts).sum(-1))


def unpack_awq(words: torch.Tensor, arg: str = "qweight") -> torch.Tensor:
    """Unpack AWQ words [R, C/8] int32 into logical codes [R, C] int32 (values 0..15)."""
    check_tensor(words, arg, dtype=torch.int32, ndim=2)
    shifts = torch.tensor(AWQ_REVERSE_ORDER, dtype=torch.int64) * 4
    codes = (_as_uint32(words).unsqueeze(-1) >> shifts) & 0xF
    return codes.reshape(words.shape[0], -1).to(torch.int32)


# --------------------------------------------------------------------------- int5 bit-planes


def pack_bitplane(bits: torch.Tensor, arg: str = "bits") -> torch.Tensor:
    """Pack [R, C] 0/1 values into [R, C/32] int32: bit b of word w = element 32*w + b."""
    check_tensor(bits, arg, dtype=_INT_DTYPES, ndim=2)
    check_multiple(bits.shape[1], 32, f"{arg}.shape[1]")
    b = bits.to(torch.int64)
    require(bool(((b == 0) | (b == 1)).all()), f"{arg} values", "0 or 1", _range(b))
    shifts = torch.arange(32, dtype=torch.int64)
    return _to_int32_bits((b.view(b.shape[0], -1, 32) << shifts).sum(-1))


def unpack_bitplane(words: torch.Tensor, arg: str = "qweight_hi") -> torch.Tensor:
    """Unpack [R, C/32] int32 bit-plane words into [R, C] int32 values 0/1."""
    check_tensor(words, arg, dtype=torch.int32, ndim=2)
    shifts = torch.arange(32, dtype=torch.int64)
    bits = (_as_uint32(words).unsqueeze(-1) >> shifts) & 1
    return bits.reshape(words.shape[0], -1).to(torch.int32)


def pack_int5(codes: torch.Tensor, arg: str = "codes") -> tuple[torch.Tensor, torch.Tensor]:
    """Split [R, C] codes 0..31 into (AWQ low-nibble words [R, C/8], fifth-bit plane [R, C/32])."""
    check_tensor(codes, arg, dtype=_INT_DTYPES, ndim=2)
    check_multiple(codes.shape[1], 32, f"{arg}.shape[1]")
    c = codes.to(torch.int64)
    require(bool(((c >= 0) & (c <= 31)).all()), f"{arg} values", "0..31", _range(c))
    return pack_awq(c & 0xF, arg), pack_bitplane(c >> 4, arg)


def unpack_int5(lo: torch.Tensor, hi: torch.Tensor, arg: str = "qweight") -> torch.Tensor:
    """Join AWQ low nibbles [R, C/8] and the fifth-bit plane [R, C/32] into codes [R, C] int32."""
    check_tensor(lo, arg, dtype=torch.int32, ndim=2)
    check_tensor(hi, f"{arg}_hi", dtype=torch.int32, shape=[lo.shape[0], None])
    require(lo.shape[1] == 4 * hi.shape[1], f"{arg}_hi.shape[1]", lo.shape[1] // 4, hi.shape[1])
    return unpack_awq(lo, arg) | (unpack_bitplane(hi, f"{arg}_hi") << 4)


def _range(t: torch.Tensor) -> str:
    return f"range {int(t.min())}..{int(t.max())}" if t.numel() else "empty"


# --------------------------------------------------------------------------- table-driven RNE


def _encode_magnitude(a: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Index of the nearest value in ascending `table` to |a|; ties go to the even index; saturates.

    Codes of these formats are monotone in magnitude and the mantissa LSB is the code LSB, so
    "tie to even index" is round-to-nearest-even, across the subnormal/normal seam too.
    """
    mids = (table[1:] + table[:-1]) / 2
    idx = torch.bucketize(a, mids)  # ties land on the lower index
    tie = idx < mids.numel()
    tie &= a == mids[idx.clamp(max=mids.numel() - 1)]
    return torch.where(tie & (idx % 2 == 1), idx + 1, idx)


# --------------------------------------------------------------------------- e2m1 (FP4)

E2M1_MAGNITUDES: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E2M1_MAX = 6.0


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """Decode e2m1 codes (uint8, values 0..15, one code per element) to float32."""
    check_tensor(codes, "codes", dtype=torch.uint8)
    c = codes.to(torch.int64)
    require(bool((c <= 15).all()), "codes values", "0..15", _range(c))
    mags = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float32)[c & 7]
    return torch.where(c >= 8, -mags, mags)


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """Encode floats to e2m1 codes (uint8 0..15, same shape): RNE, saturating to ±6; NaN is refused.

    -0.0 and negatives that round to zero keep their sign bit (code 8), as OCP conversion does.
    """
    check_tensor(x, "x", dtype=_FLOAT_DTYPES)
    xd = x.to(torch.float64)
    require(not bool(torch.isnan(xd).any()), "x", "no NaN (e2m1 has no NaN code)", "NaN")
    table = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float64)
    mag = _encode_magnitude(xd.abs(), table)
    return (mag + 8 * torch.signbit(xd).to(torch.int64)).to(torch.uint8)


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    """Pack e2m1 codes [..., 2n] uint8 two per byte -> [..., n] (low nibble = even element)."""
    check_tensor(codes, "codes", dtype=torch.uint8)
    require(codes.dim() >= 1, "codes.ndim", ">= 1", codes.dim())
    check_multiple(codes.shape[-1], 2, "codes.shape[-1]")
    require(bool((codes <= 15).all()), "codes values", "0..15", _range(codes.to(torch.int64)))
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """Unpack [..., n] uint8 into e2m1 codes [..., 2n] uint8 (low nibble first)."""
    check_tensor(packed, "packed", dtype=torch.uint8)
    require(packed.dim() >= 1, "packed.ndim", ">= 1", packed.dim())
    out = torch.stack((packed & 0xF, packed >> 4), dim=-1)
    return out.reshape(*packed.shape[:-1], 2 * packed.shape[-1])


# --------------------------------------------------------------------------- e8m0 (MX scale)

E8M0_BIAS = 127
E8M0_NAN = 255


def e8m0_decode(codes: torch.Tensor) -> torch.Tensor:
    """Decode e8m0 scale codes (uint8) to float32 2**(code-127); code 255 decodes to NaN."""
    check_tensor(codes, "codes", dtype=torch.uint8)
    e = codes.to(torch.float64) - E8M0_BIAS
    vals = torch.pow(torch.tensor(2.0, dtype=torch.float64), e)
    return torch.where(codes == E8M0_NAN, torch.nan, vals).to(torch.float32)


def e8m0_encode(x: torch.Tensor, rounding: Literal["floor", "nearest"] = "floor") -> torch.Tensor:
    """Encode positive scales to e8m0 codes (uint8); NaN/±inf -> 255; 0 -> 0; negatives refused.

    "floor" is the OCP MX scale rule (largest power of two <= x, so amax/scale never exceeds the
    element format's range); "nearest" minimises |x - 2**e| with ties going up. Out-of-range
    values clamp to 2**-127 / 2**127.
    """
    check_tensor(x, "x", dtype=_FLOAT_DTYPES)
    require(rounding in ("floor", "nearest"), "rounding", "'floor' or 'nearest'", rounding)
    xd = x.to(torch.float64)
    require(not bool((xd < 0).any()), "x", "non-negative scales", "negative values")
    finite_pos = torch.isfinite(xd) & (xd > 0)
    safe = torch.where(finite_pos, xd, torch.ones_like(xd))
    mant, exp = torch.frexp(safe)  # safe = mant * 2**exp with mant in [0.5, 1): floor log2 = exp-1
    e = exp.to(torch.int64) - 1
    if rounding == "nearest":
        e = e + (mant >= 0.75).to(torch.int64)  # 1.5 * 2**e is the linear midpoint to 2**(e+1)
    code = (e + E8M0_BIAS).clamp(0, 254)
    code = torch.where(finite_pos, code, torch.zeros_like(code))
    code = torch.where(torch.isnan(xd) | torch.isinf(xd), E8M0_NAN, code)
    return code.to(torch.uint8)


# --------------------------------------------------------------------------- e4m3fn (FP8)

E4M3_MAX = 448.0
E4M3_NAN_CODES = (0x7F, 0xFF)


def _e4m3_magnitudes() -> torch.Tensor:
    """Magnitudes of codes 0..126 in fp64 (code 127 is NaN)."""
    c = torch.arange(127, dtype=torch.int64)
    e, m = c >> 3, (c & 7).to(torch.float64)
    normal = (1 + m / 8) * torch.pow(2.0, (e - 7).to(torch.float64))
    sub = (m / 8) * 2.0**-6
    return torch.where(e == 0, sub, normal)


def e4m3_decode(codes: torch.Tensor) -> torch.Tensor:
    """Decode OCP e4m3fn codes (uint8) to float32; 0x7f/0xff decode to NaN."""
    check_tensor(codes, "codes", dtype=torch.uint8)
    c = codes.to(torch.int64)
    mags = torch.cat((_e4m3_magnitudes(), torch.tensor([torch.nan], dtype=torch.float64)))
    vals = mags[c & 0x7F]
    return torch.where(c >= 0x80, -vals, vals).to(torch.float32)


def e4m3_encode(x: torch.Tensor) -> torch.Tensor:
    """Encode floats to OCP e4m3fn codes (uint8): RNE, saturating to ±448, never emits NaN.

    Mirrors the log's wrapped hardware convert: NaN -> 0x00, -0.0 -> 0x00, ±inf -> ±448;
    a negative value that rounds to zero keeps its sign (0x80), as the hardware convert does.
    """
    check_tensor(x, "x", dtype=_FLOAT_DTYPES)
    xd = x.to(torch.float64)
    xd = torch.where(torch.isnan(xd) | (xd == 0), torch.zeros_like(xd), xd)
    mag = _encode_magnitude(xd.abs(), _e4m3_magnitudes())
    return (mag + 0x80 * torch.signbit(xd).to(torch.int64)).to(torch.uint8)
