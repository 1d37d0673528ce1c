"""Exhaustive codec tests: every code round-trips, every encode is nearest-value optimal."""

from __future__ import annotations

import pytest
import torch
from paro_kernels import formats as F


def _edge_and_random(max_val: float, n: int = 20000, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    rnd = (torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1) * max_val * 1.3
    logs = torch.exp2(torch.empty(n, dtype=torch.float64).uniform_(-12, 10, generator=g))
    logs = logs * torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
    return torch.cat((rnd, logs)).to(torch.float32).to(torch.float64)


def _brute_nearest(x: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Best achievable |x - v| over all finite codes (saturating: clamp x to the finite range)."""
    finite = values[torch.isfinite(values)]
    xc = x.clamp(finite.min().item(), finite.max().item())
    return (xc.unsqueeze(1) - finite.unsqueeze(0)).abs().min(dim=1).values


# ----------------------------------------------------------------- AWQ int4 / int5 bit-planes


def test_awq_order_matches_autoawq_layout() -> None:
    # Column j of a block holds value j; slot i must then hold AWQ_PACK_ORDER[i].
    word = int(F.pack_awq(torch.arange(8, dtype=torch.int32).view(1, 8))[0, 0]) & 0xFFFFFFFF
    slots = [(word >> (4 * i)) & 0xF for i in range(8)]
    assert slots == [0, 2, 4, 6, 1, 3, 5, 7]
    assert word == 0x75316420
    # vLLM's awq_triton unpack: shifts = AWQ_REVERSE_ORDER * 4.
    assert [slots.index(j) for j in range(8)] == list(F.AWQ_REVERSE_ORDER)


def test_awq_all_codes_every_column_roundtrip() -> None:
    # Every code 0..15 in every column position, incl. nibble 7 >= 8 (sign bit of the int32).
    codes = torch.arange(16, dtype=torch.int32).view(16, 1).repeat(1, 16)
    codes = (codes + torch.arange(16, dtype=torch.int32)) % 16
    packed = F.pack_awq(codes)
    assert packed.dtype == torch.int32 and packed.shape == (16, 2)
    assert torch.equal(F.unpack_awq(packed), codes)
    assert bool((packed < 0).any())


def test_awq_contract_errors() -> None:
    with pytest.raises(ValueError, match=r"codes.shape\[1\]: expected a positive multiple of 8"):
        F.pack_awq(torch.zeros(2, 12, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"codes values: expected 0\.\.15"):
        F.pack_awq(torch.full((1, 8), 16, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"qweight.dtype: expected torch.int32, got torch.int64"):
        F.unpack_awq(torch.zeros(1, 1, dtype=torch.int64))


def test_int5_all_codes_roundtrip_and_plane_layout() -> None:
    codes = (torch.arange(32, dtype=torch.int32).view(32, 1) + torch.arange(64)) % 32
    lo, hi = F.pack_int5(codes)
    assert lo.shape == (32, 8) and hi.shape == (32, 2)
    assert torch.equal(F.unpack_int5(lo, hi), codes)
    # Low nibbles are exactly the int4 AWQ layout; bit b of word w = 5th bit of column 32w+b.
    assert torch.equal(lo, F.pack_awq(codes & 0xF))
    row = codes[3]
    for w in range(2):
        word = int(hi[3, w]) & 0xFFFFFFFF
        assert [(word >> b) & 1 for b in range(32)] == (row[32 * w : 32 * w + 32] >> 4).tolist()


def test_int5_contract_errors() -> None:
    with pytest.raises(ValueError, match=r"codes values: expected 0\.\.31"):
        F.pack_int5(torch.full((1, 32), 32, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"qweight_hi.shape\[1\]: expected 1, got 2"):
        F.unpack_int5(torch.zeros(1, 4, dtype=torch.int32), torch.zeros(1, 2, dtype=torch.int32))


# ----------------------------------------------------------------- e2m1


def test_e2m1_all_codes_roundtrip() -> None:
    codes = torch.arange(16, dtype=torch.uint8)
    vals = F.e2m1_decode(codes)
    assert vals[:8].tolist() == list(F.E2M1_MAGNITUDES)
    assert (vals[8:] == -vals[:8]).all()
    assert torch.equal(F.e2m1_encode(vals), codes)  # -0.0 keeps code 8


def test_e2m1_encode_is_nearest_even_saturating() -> None:
    table = F.e2m1_decode(torch.arange(16, dtype=torch.uint8)).double()
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=torch.float64)
    x = torch.cat((_edge_and_random(6.0), mids, -mids, torch.tensor([7.0, 1e9, -1e9])))
    codes = F.e2m1_encode(x)
    got = F.e2m1_decode(codes).double()
    err = (got - x.clamp(-6, 6)).abs()
    assert torch.equal(err, _brute_nearest(x, table))
    # ties go to the even mantissa (even code)
    assert F.e2m1_encode(mids).tolist() == [0, 2, 2, 4, 4, 6, 6]
    assert F.e2m1_encode(torch.tensor([7.0, 1e9, -1e9])).tolist() == [7, 7, 15]


def test_fp4_pack_low_nibble_is_even_element() -> None:
    codes = torch.arange(256, dtype=torch.int32)
    pairs = torch.stack((codes % 16, codes // 16), dim=-1).reshape(-1).to(torch.uint8)
    packed = F.pack_fp4(pairs)
    assert torch.equal(packed, torch.arange(256, dtype=torch.int32).to(torch.uint8))
    assert torch.equal(F.unpack_fp4(packed), pairs)


def test_e2m1_contract_errors() -> None:
    with pytest.raises(ValueError, match="x: expected no NaN"):
        F.e2m1_encode(torch.tensor([float("nan")]))
    with pytest.raises(ValueError, match=r"codes.shape\[-1\]: expected a positive multiple of 2"):
        F.pack_fp4(torch.zeros(3, dtype=torch.uint8))


# ----------------------------------------------------------------- e8m0


def test_e8m0_all_codes_roundtrip() -> None:
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    vals = F.e8m0_decode(codes)
    assert torch.isnan(vals[255])
    expect = torch.pow(2.0, torch.arange(255, dtype=torch.float64) - 127)
    assert torch.equal(vals[:255].double(), expect)
    for mode in ("floor", "nearest"):
        assert torch.equal(F.e8m0_encode(vals[:255], rounding=mode), codes[:255])
    assert F.e8m0_encode(torch.tensor([float("nan"), float("inf"), 0.0])).tolist() == [255, 255, 0]


@pytest.mark.parametrize("mode", ["floor", "nearest"])
def test_e8m0_encode_matches_brute_force(mode: str) -> None:
    vals = torch.pow(2.0, torch.arange(255, dtype=torch.float64) - 127)
    x = _edge_and_random(1e3).abs()
    x = x[x > 0]
    x = torch.cat((x, 1.5 * vals[100:110], 0.75 * vals[100:110]))
    got = F.e8m0_encode(x, rounding=mode).long()
    if mode == "floor":
        best = (vals.unsqueeze(0) <= x.unsqueeze(1)).sum(1) - 1  # largest 2**e <= x
    else:
        d = (x.unsqueeze(1) - vals.unsqueeze(0)).abs()
        dmin = d.min(1, keepdim=True).values
        best = ((d == dmin) * torch.arange(255)).max(1).values  # ties go up
    assert torch.equal(got, best)


def test_e8m0_refuses_negative() -> None:
    with pytest.raises(ValueError, match="x: expected non-negative scales"):
        F.e8m0_encode(torch.tensor([-1.0]))


# ----------------------------------------------------------------- e4m3


def test_e4m3_decode_matches_torch_on_all_codes() -> None:
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    ours = F.e4m3_decode(codes)
    theirs = codes.view(torch.float8_e4m3fn).to(torch.float32)
    nan = torch.isnan(theirs)
    assert nan.nonzero().flatten().tolist() == [0x7F, 0xFF]
    assert torch.equal(torch.isnan(ours), nan)
    assert torch.equal(ours[~nan], theirs[~nan])
    assert ours[0x7E].item() == 448.0 and ours[0xFE].item() == -448.0


def test_e4m3_all_codes_roundtrip() -> None:
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    finite = torch.tensor([c not in F.E4M3_NAN_CODES for c in range(256)])
    vals = F.e4m3_decode(codes[finite])
    back = F.e4m3_encode(vals)
    expect = codes[finite].clone()
    expect[expect == 0x80] = 0x00  # -0.0 encodes as +0 (the log's hardware wrapper)
    assert torch.equal(back, expect)


def test_e4m3_encode_nearest_even_saturating_and_specials() -> None:
    table = F.e4m3_decode(torch.arange(256, dtype=torch.int32).to(torch.uint8)).double()
    finite = table[torch.isfinite(table)]
    pos = finite[finite > 0].unique().sort().values
    mids = (pos[1:] + pos[:-1]) / 2
    x = torch.cat((_edge_and_random(448.0), mids, -mids, pos[:3] / 2, torch.tensor([500.0, 1e6])))
    codes = F.e4m3_encode(x)
    got = F.e4m3_decode(codes).double()
    assert torch.equal((got - x.clamp(-448, 448)).abs(), _brute_nearest(x, table))
    # ties: the chosen code is even (mantissa LSB 0)
    assert bool((F.e4m3_encode(mids).long() % 2 == 0).all())
    # agrees with torch's own RNE cast wherever that is defined (in range)
    inr = x.abs() <= 448
    torch_codes = x[inr].to(torch.float32).to(torch.float8_e4m3fn).view(torch.uint8)
    ours = codes[inr].clone()
    neg_zero = torch_codes == 0x80
    assert torch.equal(ours[~neg_zero], torch_codes[~neg_zero])
    specials = torch.tensor([float("nan"), -0.0, 0.0, float("inf"), float("-inf"), -1e-12])
    assert F.e4m3_encode(specials).tolist() == [0x00, 0x00, 0x00, 0x7E, 0xFE, 0x80]
    assert not bool(torch.isin(codes, torch.tensor([0x7F, 0xFF], dtype=torch.uint8)).any())
