"""E2M1 element functions (nvfp4_lab.formats.e2m1) against docs/numerics.md, E2M1.

Grid {0, 0.5, 1, 1.5, 2, 3, 4, 6}, codes 0..7, bit 3 the sign; round-to-nearest-even by the
threshold table ([0, 0.25] -> 0, (0.25, 0.75) -> 0.5, [0.75, 1.25] -> 1, ..., > 5 -> 6);
two codes per byte, element 2j in the low nibble.
"""
from __future__ import annotations

import pytest
import torch
from helpers.te_reference import E2M1_MAGNITUDES, e2m1_magnitude_code

from nvfp4_lab.formats import e2m1

F32 = torch.float32
INF = torch.tensor(float("inf"))
GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
# tie t -> (value just below t, value at t, value just above t), from the E2M1 table
TIES = {0.25: (0.0, 0.0, 0.5), 0.75: (0.5, 1.0, 1.0), 1.25: (1.0, 1.0, 1.5),
        1.75: (1.5, 2.0, 2.0), 2.5: (2.0, 2.0, 3.0), 3.5: (3.0, 4.0, 4.0),
        5.0: (4.0, 4.0, 6.0)}


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


def ulps_around(v: float, n: int) -> torch.Tensor:
    """The fp32 values within n ulps of v (v included), non-negative."""
    b = torch.tensor(v, dtype=F32).view(torch.int32) + torch.arange(-n, n + 1, dtype=torch.int32)
    return b.clamp_min(0).view(F32)


def test_grid_constants():
    assert list(e2m1.GRID) == GRID and e2m1.FP4_MAX == 6.0


def test_grid_round_trips():
    g = torch.tensor(GRID)
    assert torch.equal(bits(e2m1.round_rne(g)), bits(g))
    codes = torch.arange(16, dtype=torch.uint8)
    values = torch.cat([g, -g])                      # code 8 is -0.0
    assert torch.equal(bits(e2m1.from_codes(codes)), bits(values))
    assert torch.equal(e2m1.to_codes(values), codes)
    assert torch.equal(e2m1.to_codes(e2m1.from_codes(codes)), codes)


def test_every_tie_and_its_fp32_neighbours():
    for t, (lo, at, hi) in TIES.items():
        tt = torch.tensor([t])
        x = torch.cat([torch.nextafter(tt, -INF), tt, torch.nextafter(tt, INF)])
        want = torch.tensor([lo, at, hi])
        assert torch.equal(e2m1.round_rne(x), want), (t, e2m1.round_rne(x))
        assert torch.equal(e2m1.to_codes(-want), e2m1.to_codes(want) | 8)


def test_rne_matches_threshold_table_densely():
    """round_rne == the E2M1 table (te_reference transcription) on 400 ulps around every
    threshold and grid point, and on 200k uniform draws in [0, 6]."""
    pts = list(TIES) + GRID
    x = torch.cat([ulps_around(v, 200) for v in pts] +
                  [torch.rand(200_000, generator=torch.Generator().manual_seed(0)) * 6])
    x = x.clamp(0.0, 6.0)
    want = E2M1_MAGNITUDES[e2m1_magnitude_code(x).long()]
    got = e2m1.round_rne(x)
    bad = (got != want).nonzero().flatten()
    assert bad.numel() == 0, (x[bad[:5]].tolist(), got[bad[:5]].tolist())


def test_saturation_after_clamp():
    """Values beyond 6 only arise from FP32 rounding of x * enc and are clamped first; the
    top interval (5, 6] rounds to 6, 5 itself (a tie) to 4."""
    y = torch.tensor([6.0000005, 6.5, 1e30, float("inf")])
    assert (e2m1.round_rne(y.clamp(0, 6)) == 6.0).all()
    top = torch.tensor([5.0, 5.0000005, 5.5, 5.9999995, 6.0])
    assert torch.equal(e2m1.round_rne(top), torch.tensor([4.0, 6.0, 6.0, 6.0, 6.0]))


def test_nan_magnitude_stays_nan():
    out = e2m1.round_rne(torch.tensor([float("nan"), 1.3, float("nan")]))
    assert torch.isnan(out[[0, 2]]).all() and out[1] == 1.5
    assert e2m1.to_codes(torch.tensor([float("nan")])).item() == 0   # documented: NaN -> 0


@pytest.mark.parametrize("keep", (False, True))
def test_apply_sign_and_negative_zero(keep):
    """TE reference (keep=False): sign from y < 0, so y = -0.0 gives +0 and y in [-0.25, 0)
    gives -0. torchao (keep=True) keeps the sign of -0.0 as well."""
    mag = torch.tensor([0.0, 0.0, 0.0, 3.0, 6.0, 0.5])
    y = torch.tensor([-0.0, 0.0, -0.2, -3.1, 6.0, -0.5])
    want = torch.tensor([-0.0 if keep else 0.0, 0.0, -0.0, -3.0, 6.0, -0.5])
    got = e2m1.apply_sign(mag, y, keep)
    assert torch.equal(bits(got.to(F32)), bits(want))
    assert torch.equal(e2m1.to_codes(got), torch.tensor([8 if keep else 0, 0, 8, 13, 7, 9],
                                                        dtype=torch.uint8))


def test_pack_nibble_order():
    codes = torch.tensor([[1, 2, 15, 0], [8, 7, 0, 9]], dtype=torch.uint8)
    packed = e2m1.pack(codes)
    assert packed.dtype == torch.uint8 and packed.shape == (2, 2)
    assert packed.tolist() == [[0x21, 0x0F], [0x78, 0x90]]        # 2j low, 2j+1 high
    assert torch.equal(e2m1.unpack(packed), codes)


def test_pack_unpack_round_trip():
    every_byte = torch.arange(256, dtype=torch.uint8).reshape(4, 64)
    unpacked = e2m1.unpack(every_byte)
    assert unpacked.shape == (4, 128) and int(unpacked.max()) == 15
    assert torch.equal(unpacked[..., 0::2], every_byte & 0xF)
    assert torch.equal(unpacked[..., 1::2], every_byte >> 4)
    assert torch.equal(e2m1.pack(unpacked), every_byte)
    g = torch.Generator().manual_seed(1)
    codes = torch.randint(0, 16, (3, 5, 32), generator=g, dtype=torch.uint8)
    assert torch.equal(e2m1.unpack(e2m1.pack(codes)), codes)
