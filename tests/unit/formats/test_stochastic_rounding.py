"""Stochastic rounding of E2M1 elements and the counter-based random bits behind it.

``exact`` SR must be unbiased; ``hw8`` follows the 8-bit ``cvt.rs`` semantics, P(up) =
floor(256 f) / 256 (docs/numerics.md, Stochastic rounding); both are reproducible functions
of (seed, stream ids, element index), with bits from MurmurHash3's fmix32 (rng.py).
The reference values here come from an independent reading of those rules (grid
neighbours in Python, exact fractions), not from the library's own helpers.
"""
from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
import torch

from nvfp4_lab.formats import Stream, e2m1, quantize, rng

GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
INTERVALS = list(zip(GRID[:-1], GRID[1:]))
M32 = 0xFFFFFFFF
SR = {"exact": e2m1.round_sr_exact, "hw8": e2m1.round_sr_hw8}


def neighbours(a: float) -> tuple[float, float]:
    """(lo, hi): the grid points around magnitude a (lo == hi on a grid point)."""
    if a in GRID:
        return a, a
    lo = max(g for g in GRID if g < a)
    return lo, GRID[GRID.index(lo) + 1]


def frac(a: float) -> Fraction:
    lo, hi = neighbours(a)
    return Fraction(0) if lo == hi else (Fraction(a) - Fraction(lo)) / (Fraction(hi) - Fraction(lo))


def key(seed=0, **ids) -> torch.Tensor:
    return rng.key_tensor(seed, Stream(**ids).ids(), "cpu")


def fp32(v: float) -> float:
    return float(torch.tensor(v, dtype=torch.float32))


def sample_points() -> list[float]:
    """Magnitudes strictly inside every grid interval, f from 0.01 to 0.99."""
    pts = []
    for lo, hi in INTERVALS:
        for f in (0.01, 0.1, 0.25, 0.3, 0.5, 0.62, 0.77, 0.9, 0.99):
            pts.append(fp32(lo + f * (hi - lo)))
    return pts



# --------------------------------------------------------------------------- the hash

def fmix32_py(h: int) -> int:
    """MurmurHash3 finaliser, uint32, pure Python."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & M32
    return h ^ (h >> 16)


def random_bits_py(i: int, k0: int, k1: int) -> int:
    """bits(key, i) = fmix32(fmix32(i XOR k0) + k1), i taken mod 2^32 (rng.py docstring)."""
    return fmix32_py(((fmix32_py((i & M32) ^ k0)) + k1) & M32)


def uint32_bits(index: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``rng.random_bits`` as int64 values in [0, 2^32) (it returns their int32 patterns)."""
    return rng.random_bits(index, k).long() & M32


def test_fmix32_py_matches_murmur3_vectors():
    # MurmurHash3_x86_32("", seed) = fmix32(seed): published vectors for seeds 1, 0xFFFFFFFF
    assert fmix32_py(1) == 0x514E28B7
    assert fmix32_py(0xFFFFFFFF) == 0x81F16F39
    assert fmix32_py(0) == 0


def test_torch_hash_matches_pure_python():
    r = random.Random(0)
    idx = [0, 1, 2, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1]
    idx += [r.randrange(2**32) for _ in range(200)]
    t = torch.tensor(idx, dtype=torch.int64)
    # the tensor hash holds uint32 values as int32 bit patterns
    assert (rng.fmix32(t.to(torch.int32)).long() & M32).tolist() == [fmix32_py(i) for i in idx]
    assert [rng.fmix32_int(i) for i in idx] == [fmix32_py(i) for i in idx]
    keys = [(0, 0), (M32, M32), (0, M32), rng.stream_key(0), rng.stream_key(123, 4, 5, 6, 7, 8),
            rng.stream_key(2**40 + 3, 1)]
    for k0, k1 in keys:
        assert 0 <= k0 <= M32 and 0 <= k1 <= M32
        got = rng.random_bits(t, torch.tensor([k0, k1], dtype=torch.int64))
        assert got.dtype == torch.int32
        assert (got.long() & M32).tolist() == [random_bits_py(i, k0, k1) for i in idx]


def test_hash_index_wraps_mod_2_32_and_keeps_shape():
    k = key(5)
    i = torch.tensor([[0, 7], [2**31, 2**32 - 1]])
    assert rng.random_bits(i, k).shape == (2, 2)
    assert torch.equal(rng.random_bits(i + 2**32, k), rng.random_bits(i, k))  # documented limit


def test_hash_top_byte_is_uniform():
    """65536 draws into 256 buckets: mean 256, sd ~16; +-6 sd would be a broken hash."""
    b = uint32_bits(torch.arange(2**16), key(1, layer=2)) >> 24
    counts = torch.bincount(b, minlength=256)
    assert ((counts - 256).abs() < 96).all()


# --------------------------------------------------------------------------- exact mode

def test_exact_sr_is_unbiased():
    """N draws of a point a = lo + f*step: the count of ups is Binomial(N, p) with
    p = ceil(f 2^24) / 2^24 (|p - f| < 2^-24), so |mean - a| < 5 sqrt(f(1-f)/N) step
    + 2^-24 step fails with probability ~6e-7 per point (and the seed is fixed)."""
    pts = sample_points()
    n = 2**14
    a = torch.tensor(pts, dtype=torch.float32)[:, None].expand(-1, n)
    bits = uint32_bits(torch.arange(a.numel()).view(a.shape), key(42))
    q = e2m1.round_sr_exact(a, bits)
    for p, row in zip(pts, q):
        lo, hi = neighbours(p)
        assert set(row.unique().tolist()) == {lo, hi}, p
        f, step = float(frac(p)), hi - lo
        mean = row.double().mean().item()
        assert abs(mean - p) < 5 * math.sqrt(f * (1 - f) / n) * step + 2**-24 * step, p


def test_exact_sr_threshold_is_24_bit():
    """up iff r24 < f * 2^24 with r24 the top 24 bits: with f = j / 2^20 the switch is
    between r24 = 16 j - 1 (up) and 16 j (down), whatever the low 8 bits hold."""
    for lo, hi in INTERVALS:
        for j in (1, 77, 2**19, 2**20 - 1):
            a = lo + (hi - lo) * j / 2**20
            assert fp32(a) == a
            at = torch.tensor([a] * 4)
            r = torch.tensor([(16 * j - 1) << 8, ((16 * j - 1) << 8) | 0xFF, (16 * j) << 8,
                              ((16 * j) << 8) | 0xFF])
            assert e2m1.round_sr_exact(at, r).tolist() == [hi, hi, lo, lo]


@pytest.mark.parametrize("mode", ["exact", "hw8"])
def test_grid_points_never_move(mode):
    a = torch.tensor(GRID)[:, None].expand(-1, 256)
    bits = uint32_bits(torch.arange(a.numel()).view(a.shape), key(3)) | 0xFF000000
    assert torch.equal(SR[mode](a, bits), a)


# --------------------------------------------------------------------------- hw8 mode

def _all_bytes(n_points: int, seed: int) -> torch.Tensor:
    """[n_points, 256] uint32 words whose top byte takes every value, low 24 bits random."""
    low = uint32_bits(torch.arange(n_points * 256).view(n_points, 256), key(seed)) & 0xFFFFFF
    return (torch.arange(256) << 24) | low


def _hw8_points() -> list[float]:
    """Random f, the thresholds j/256 themselves and just above them, and just below them
    where t = a + u step is exact in fp32 (a >= 0.5, see test_hw8_floor_law_below_quarter)."""
    r = random.Random(1)
    pts = []
    for lo, hi in INTERVALS:
        step = hi - lo
        pts += [fp32(lo + r.random() * step) for _ in range(40)]
        for j in (1, 2, 100, 128, 200, 255):
            t = lo + step * j / 256
            pts += [t, math.nextafter(fp32(t), math.inf)]
            if lo >= 0.5:
                pts.append(float(torch.nextafter(torch.tensor(t), torch.tensor(0.0))))
    return [p for p in pts if neighbours(p)[0] != neighbours(p)[1]]


def test_hw8_up_probability_is_floor_256f_over_256():
    pts = _hw8_points()
    a = torch.tensor(pts, dtype=torch.float32)[:, None].expand(-1, 256)
    q = e2m1.round_sr_hw8(a, _all_bytes(len(pts), 7))
    for p, row in zip(pts, q):
        lo, hi = neighbours(p)
        f = frac(p)
        ups = int((row == hi).sum())
        assert ups + int((row == lo).sum()) == 256, p  # only the two neighbours
        assert ups == math.floor(256 * f), (p, ups, float(f))
        # bias toward zero: a - E[q] = step (f - floor(256 f)/256) in [0, step/256)
        bias = Fraction(p) - (Fraction(lo) + Fraction(hi - lo) * ups / 256)
        assert 0 <= bias < Fraction(hi - lo) / 256


def test_hw8_floor_law_below_quarter():
    """Magnitudes just below an up-threshold j/512 in [0, 0.25): t = a + r/512 is rounded
    to fp32 in the binade [0.25, 0.5), so exact t = 0.5 - 2^-26 ties up to 0.5 and rounds
    *up* although f = 2a < 1 - r/256. The documented law P(up) = floor(256 f)/256 (and the
    bias toward zero) then fails by one byte value."""
    bad = []
    for j in (1, 64, 127, 128):
        a = j / 512 - 2**-26
        assert fp32(a) == a
        q = e2m1.round_sr_hw8(torch.full((256,), a), torch.arange(256) << 24)
        ups = int((q == 0.5).sum())
        if ups != math.floor(256 * frac(a)):
            bad.append((a, ups, math.floor(256 * frac(a))))
    assert not bad, f"(a, ups, floor(256 f)): {bad}"


def test_hw8_mean_through_random_bits():
    """With hashed bits instead of an enumeration, the mean still sits within the Bernoulli
    bound of the hw8 expectation lo + step floor(256 f)/256."""
    pts = sample_points()
    n = 2**13
    a = torch.tensor(pts)[:, None].expand(-1, n)
    q = e2m1.round_sr_hw8(a, uint32_bits(torch.arange(a.numel()).view(a.shape), key(8)))
    for p, row in zip(pts, q):
        lo, hi = neighbours(p)
        pu = math.floor(256 * frac(p)) / 256
        expect = lo + pu * (hi - lo)
        bound = 5 * math.sqrt(pu * (1 - pu) / n) * (hi - lo) + 1e-12
        assert abs(row.double().mean().item() - expect) <= bound, p


# --------------------------------------------------------------------------- through quantize

def _rows_with_amax_6(n: int, values: list[float]) -> torch.Tensor:
    """[n, 32]: each row is [6, values...]: every 1x32 / 1x16 block has amax 6 (MXFP4: k = 0,
    encode factor exactly 1; NVFP4: A = 6, block scale 448)."""
    row = torch.tensor([6.0] + values, dtype=torch.float32)
    return row.expand(n, -1).contiguous()


@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4"])
@pytest.mark.parametrize("mode", ["exact", "hw8"])
def test_quantize_sr_mean(fmt, mode):
    """Column j of n identical rows gets n independent draws (each element has its own index).
    Expected mean: x (exact) or the hw8 expectation; bound as in the function-level tests,
    + 1e-6 |x| for NVFP4's fp32 encode/decode factors (a few ulps from 1)."""
    vals = [0.1, -0.3, 0.62, -0.9, 1.1, -1.3, 1.45, -1.6, 1.9, -2.2, 2.5, -2.7, 3.3, -3.9,
            4.2, -4.5, 5.0, -5.5, 5.9, 0.05, -0.45, 0.8, 1.6, -2.05, 3.1, -3.6, 4.01, -4.99,
            5.3, 0.3, -1.05]
    n = 2**13
    x = _rows_with_amax_6(n, vals)
    block = (1, 32) if fmt == "mxfp4" else (1, 16)
    d = quantize(x, fmt, block=block, rounding="sr", sr_mode=mode, seed=5).dequantize()
    for j, v in enumerate(vals, start=1):
        v = fp32(v)
        lo, hi = neighbours(abs(v))
        p = float(frac(abs(v))) if mode == "exact" else math.floor(256 * frac(abs(v))) / 256
        expect = math.copysign(lo + p * (hi - lo), v)
        col = d[:, j]
        if fmt == "mxfp4":  # encode/decode factor exactly 1: the draws are the neighbours
            assert set(col.abs().unique().tolist()) <= {lo, hi}
        assert col.abs().unique().numel() <= 2
        err = abs(col.double().mean().item() - expect)
        assert err < 5 * math.sqrt(p * (1 - p) / n) * (hi - lo) + 2**-24 + 1e-6 * abs(v), (v, err)


def test_sr_reproducible_and_stream_dependent():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 64, generator=g)

    def codes(**kw):
        return quantize(x, "nvfp4", rounding="sr", **kw).codes()

    base = codes(seed=1, stream=Stream(layer=2, step=3))
    assert torch.equal(base, codes(seed=1, stream=Stream(layer=2, step=3)))
    assert torch.equal(base, codes(seed=1, stream=Stream(layer=2, step=3), sr_mode="hw8"))
    for other in (dict(seed=2, stream=Stream(layer=2, step=3)),
                  dict(seed=1, stream=Stream(layer=3, step=3)),
                  dict(seed=1, stream=Stream(layer=2, step=4)),
                  dict(seed=1, stream=Stream(layer=2, step=3, gemm=1)),
                  dict(seed=1, stream=Stream(layer=2, step=3, operand=1)),
                  dict(seed=1, stream=Stream(layer=2, step=3, call=1))):
        assert not torch.equal(base, codes(**other)), other


def test_rne_is_deterministic_and_ignores_the_stream():
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))
    a = quantize(x, "nvfp4")
    for kw in (dict(), dict(seed=9, stream=Stream(layer=1, step=2, call=3))):
        b = quantize(x, "nvfp4", rounding="rne", **kw)
        assert torch.equal(a.data, b.data)
        assert torch.equal(a.scales.view(torch.uint8), b.scales.view(torch.uint8))


def _sr_reference(x: torch.Tensor, bits: torch.Tensor, mode: str) -> torch.Tensor:
    """Independent SR of magnitudes already in the E2M1 range: exact up iff r24 < f 2^24,
    hw8 up iff r8 >= 256 (1 - f) (valid away from the fp32 edge of the test above)."""
    out = []
    for v, b in zip(x.flatten().tolist(), bits.flatten().tolist()):
        lo, hi = neighbours(abs(v))
        f = frac(abs(v))
        up = (b >> 8) < f * 2**24 if mode == "exact" else (b >> 24) >= 256 * (1 - f)
        out.append(math.copysign(hi if up else lo, v))
    return torch.tensor(out, dtype=torch.float32).view(x.shape)


@pytest.mark.parametrize("mode", ["exact", "hw8"])
def test_sr_bits_follow_the_element_index_in_the_tensor_as_passed(mode):
    """MXFP4 on a 32x32 tensor with +-6 on the diagonal: every row block and every column
    block has amax 6, so the encode factor is 1 along either axis and the rounded values are
    SR(x) itself. The bits of x[i, j] are random_bits(i * 32 + j): quantizing along axis -1
    or 0 gives the same result, predicted from rng.random_bits directly. Passing x.T instead
    changes the indices (x[i, j] sits at j * 32 + i), hence the bits."""
    g = torch.Generator().manual_seed(2)
    x = (torch.rand(32, 32, generator=g) * 11.8 - 5.9)
    x[x.abs() < 0.05] = 0.3
    x.diagonal().copy_(torch.where(torch.rand(32, generator=g) < 0.5, -6.0, 6.0))
    seed, stream = 4, Stream(layer=1, step=7)
    k = rng.key_tensor(seed, stream.ids(), "cpu")
    idx = torch.arange(32 * 32).view(32, 32)
    expected = _sr_reference(x, uint32_bits(idx, k), mode)
    expected_t = _sr_reference(x, uint32_bits(idx.T, k), mode)  # bits as x.T would get them
    assert not torch.equal(expected, expected_t)

    def sr(t, axis):
        return quantize(t, "mxfp4", axis=axis, rounding="sr", sr_mode=mode, seed=seed,
                        stream=stream).dequantize()

    assert torch.equal(sr(x, -1), expected)
    assert torch.equal(sr(x, 0), expected)
    assert torch.equal(sr(x.T.contiguous(), -1).T, expected_t)
    assert torch.equal(sr(x.T, 0).T, expected_t)  # a non-contiguous view: same indices as x.T
