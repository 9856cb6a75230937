"""MXFP4 against exact arithmetic written here (Python floats and math.frexp, never log2).

E8M0 rules (paper App. B.4; docs/numerics.md, MXFP4), per block amax a:
    ceil  (default, TE reference / RCEIL): k = ceil(log2(fp32(a / 6)))
    floor (OCP):                           k = floor(log2 a) - 2
    even  (torchao EVEN):                  k = floor(log2 a') - 2, a' = a with its mantissa
                                           rounded to one bit (up from 1.75)
k clamped to [-127, 127] (zero block: byte 0 = 2^-127), NaN/Inf block: byte 0xFF.
Elements: E2M1 RNE of clamp(x / 2^k, +-6); decode = value * 2^k, exactly.
"""
from __future__ import annotations

import math

import pytest
import torch

from nvfp4_lab.formats import fake_quantize, quantize

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
FLT_MAX = float(torch.finfo(F32).max)
MAGS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
THRESHOLDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
TIES_UP = (0.75, 1.75, 3.5)      # the even neighbour is above these midpoints


def f32(v: float) -> float:
    return float(torch.tensor(v, dtype=F32))   # RNE, inf on overflow


def f32_next(v: float, n: int = 1) -> float:
    return float((torch.tensor(v, dtype=F32).view(torch.int32) + n).view(F32))


def bits(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous()
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


# -------------------------------------------------------------------- exact E8M0 rules
def _clamp(k: int) -> int:
    return max(-127, min(127, k))


def k_ceil(a: float) -> int:
    t = f32(a / 6.0)             # correctly rounded: double division, then fp32
    if t == 0.0:
        return -127
    m, e = math.frexp(t)         # t = m * 2^e, m in [0.5, 1)
    return _clamp(e - 1 if m == 0.5 else e)


def k_floor(a: float) -> int:
    if a == 0.0:
        return -127
    _, e = math.frexp(a)
    return _clamp((e - 1) - 2)


def k_even(a: float) -> int:
    if a == 0.0:
        return -127
    m, e = math.frexp(a)
    return _clamp((e - 1) + (2 * m >= 1.75) - 2)


RULES = {"ceil": k_ceil, "floor": k_floor, "even": k_even}


def e2m1_code(y: torch.Tensor) -> torch.Tensor:
    """Clamped fp32 y -> E2M1 code by the RNE threshold table; sign bit kept (-0.0 -> 8)."""
    a = y.abs()
    mag = torch.zeros(y.shape, dtype=torch.int32)
    for t in THRESHOLDS:
        mag += (a > t) | ((a == t) & (t in TIES_UP))
    return (mag | (torch.signbit(y).int() << 3)).to(torch.uint8)


def decode(codes: torch.Tensor) -> torch.Tensor:
    mag = torch.tensor(MAGS, dtype=F32)[(codes & 7).long()]
    return torch.where((codes & 8) != 0, -mag, mag)


def reference(x: torch.Tensor, mode: str):
    """x: [n, 32] finite blocks -> (scale bytes uint8 [n], codes uint8 [n, 32],
    dequantized fp32 [n, 32]), all from Python-exact scale exponents."""
    xf = x.float()
    ks = [RULES[mode](a) for a in xf.abs().amax(-1).tolist()]
    inv = torch.tensor([math.ldexp(1.0, -k) for k in ks], dtype=F32).unsqueeze(1)
    codes = e2m1_code(torch.clamp(xf * inv, -6.0, 6.0))
    # value * 2^k in double is exact; one rounding to fp32 (exact unless it overflows)
    vals = decode(codes).double() * torch.tensor([math.ldexp(1.0, k) for k in ks],
                                                 dtype=torch.float64).unsqueeze(1)
    return torch.tensor([k + 127 for k in ks], dtype=torch.uint8), codes, vals.to(F32)


def check(x: torch.Tensor, mode: str):
    """Quantize x [n, 32] with one block per row and compare everything to the reference."""
    s_ref, c_ref, d_ref = reference(x, mode)
    q = quantize(x, "mxfp4", block=(1, 32), mx_scale=mode)
    assert torch.equal(q.scales.view(torch.uint8).flatten(), s_ref)
    assert torch.equal(q.codes(), c_ref)
    assert torch.equal(bits(q.dequantize()), bits(d_ref))
    return q


def blocks_with_amax(amaxes, seed=0, dtype=F32):
    """One 32-element block per amax: element 3 is -amax, the rest uniform in (-amax, amax)."""
    a = torch.tensor(amaxes, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    x = ((torch.rand(len(amaxes), 32, generator=g, dtype=torch.float64) * 2 - 1) * a[:, None])
    x = x.to(dtype)
    x[:, 3] = -a.to(dtype)
    assert torch.equal(x.abs().amax(-1).double(), a)   # amaxes representable in dtype
    return x


# ------------------------------------------------------------------ App. B.4 example
@pytest.mark.parametrize("delta", [0.1, 2.0 ** -20, 0.4])
def test_b4_worked_example(delta):
    """amax = 3 + delta (delta < 0.5): ceil gives decode scale 1, the amax quantizes to 3
    and codes 4 and 6 go unused; the OCP floor rule gives scale 2^-1, so the amax maps to
    6 + 2 delta -> 6 and the whole grid is used."""
    amax = f32(3.0 + delta)
    x = torch.linspace(-amax, amax, 32, dtype=F32)
    x[0], x[-1] = -amax, amax
    x = x.unsqueeze(0)

    qc = check(x, "ceil")
    assert k_ceil(amax) == 0 and qc.scales.view(torch.uint8).item() == 127
    mags = qc.codes() & 7
    assert mags[0, -1] == 5 and mags.max() == 5        # amax -> 3; 4 (code 6), 6 (code 7) unused
    assert qc.dequantize()[0, -1] == 3.0

    qf = check(x, "floor")
    assert k_floor(amax) == -1 and qf.scales.view(torch.uint8).item() == 126
    assert (qf.codes()[0, -1] & 7) == 7                # amax -> 6 * 2^-1
    assert set((qf.codes() & 7).flatten().tolist()) == set(range(8))   # all 8 magnitudes
    assert qf.dequantize()[0, -1] == 3.0


# ----------------------------------------------------------------- E8M0 corner cases
def _pow2_boundary_amaxes():
    """6 * 2^k exactly and 1, 2, 3 fp32 ulps above, for every k with 6 * 2^k a (possibly
    subnormal) fp32 number; plus the fp32-subnormal descale region around 3 * 2^-126."""
    out = []
    for k in range(-150, 126):
        base = 6.0 * 2.0 ** k
        assert f32(base) == base
        out += [base] + [f32_next(base, n) for n in (1, 2, 3)]
    out += [3 * 2.0 ** -126] + [f32_next(3 * 2.0 ** -126, n) for n in (1, 2, 3, 4)]
    out += [2.0 ** -149, 2.0 ** -140, 5 * 2.0 ** -130, 1.5 * 2.0 ** -126, 2.0 ** -126]
    return out


@pytest.mark.parametrize("mode", list(RULES))
def test_e8m0_pow2_boundaries_whole_range(mode):
    check(blocks_with_amax(_pow2_boundary_amaxes(), seed=1), mode)


def test_ceil_boundary_values():
    """Spot values of the ceil rule, derived by hand."""
    assert k_ceil(6.0) == 0 and k_ceil(f32_next(6.0)) == 1
    assert k_ceil(6.0 * 2.0 ** 125) == 125 and k_ceil(6.0 * 2.0 ** -127) == -127
    assert k_ceil(3 * 2.0 ** -126) == -127            # fp32(a/6) = 2^-127 exactly
    assert k_ceil(f32_next(3 * 2.0 ** -126)) == -127  # a/6 rounds down to 2^-127 in fp32
    assert k_ceil(f32_next(3 * 2.0 ** -126, 2)) == -126
    amaxes = [6.0 * 2.0 ** k for k in range(-127, 126)]
    q = quantize(blocks_with_amax(amaxes, seed=2), "mxfp4")
    assert torch.equal(q.scales.view(torch.uint8).flatten().long(), torch.arange(0, 253))
    q = quantize(blocks_with_amax([f32_next(a) for a in amaxes], seed=2), "mxfp4")
    # one ulp above: k + 1, except at k = -127, where a/6 rounds to the fp32 subnormal 2^-127
    expected = torch.cat([torch.zeros(1, dtype=torch.long), torch.arange(2, 254)])
    assert torch.equal(q.scales.view(torch.uint8).flatten().long(), expected)


@pytest.mark.parametrize("mode", list(RULES))
def test_zero_and_subnormal_blocks(mode):
    """A zero block gets byte 0 (2^-127) and decodes to (signed) zeros; subnormal amaxes
    clamp to 2^-127 and keep their codes."""
    x = blocks_with_amax([0.0, 2.0 ** -149, 2.0 ** -135, 5 * 2.0 ** -130, 1.0], seed=3)
    x[0] = 0.0
    x[0, 1::2] = -0.0
    q = check(x, mode)
    assert q.scales.view(torch.uint8)[:4, 0].tolist() == [0, 0, 0, 0]
    assert torch.equal(q.codes()[0], torch.tensor([0, 8] * 16, dtype=torch.uint8))
    assert torch.equal(bits(q.dequantize()[0]), bits(x[0]))
    # 5 * 2^-130 / 2^-127 = 0.625 -> 0.5: code 1 survives in the subnormal block
    assert (q.codes()[3] & 7).max() == 1


@pytest.mark.parametrize("mode", list(RULES))
def test_near_flt_max(mode):
    """Largest amaxes: k stays <= 126 (the clamp at 127 is never reached by an E2M1 block)."""
    amaxes = [FLT_MAX, f32_next(FLT_MAX, -1), 1.5 * 2.0 ** 127, 1.4 * 2.0 ** 127, 2.0 ** 127,
              1.75 * 2.0 ** 127]
    amaxes = [f32(a) for a in amaxes]
    q = check(blocks_with_amax(amaxes, seed=4), mode)
    expected = {"ceil": [126, 126, 125, 125, 125, 126], "floor": [125] * 6,
                "even": [126, 126, 125, 125, 125, 126]}[mode]
    assert (q.scales.view(torch.uint8).flatten().long() - 127).tolist() == expected


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("mode", list(RULES))
def test_nonfinite_block(mode, bad):
    """A NaN/Inf element: its block gets 0xFF and decodes to all NaN; other blocks are
    untouched and finite."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 64, generator=g)
    x[1, 40] = bad
    q = quantize(x, "mxfp4", mx_scale=mode)
    s = q.scales.view(torch.uint8)
    assert s[1, 1] == 0xFF and (s != 0xFF).sum() == 7
    d = q.dequantize()
    assert torch.isnan(d[1, 32:]).all() and torch.isfinite(d[1, :32]).all()
    assert torch.isfinite(d[[0, 2, 3]]).all()
    mask = torch.ones(8, dtype=torch.bool)
    mask[3] = False                                   # block (1, 1) in row-major order
    s_ref, c_ref, d_ref = reference(x.reshape(8, 32)[mask], mode)
    assert torch.equal(s.flatten()[mask], s_ref)
    assert torch.equal(q.codes().reshape(8, 32)[mask], c_ref)
    assert torch.equal(bits(d.reshape(8, 32)[mask]), bits(d_ref))
    assert q.has_nonfinite and torch.isnan(fake_quantize(x, "mxfp4", mx_scale=mode)[1, 32:]).all()


# ------------------------------------------------------------- decode and random data
@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("mode", list(RULES))
def test_random_data_and_decode(mode, dtype):
    """Normal and heavy-tailed data: scales, codes and decode (= value * 2^k exactly)."""
    g = torch.Generator().manual_seed(6)
    x = torch.randn(64, 32, generator=g) * torch.exp(2 * torch.randn(64, 1, generator=g))
    x[:32] *= torch.exp(torch.randn(32, 32, generator=g))
    check(x.to(dtype), mode)


@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("mode", list(RULES))
def test_fake_quantize_equals_dequantize(mode, dtype):
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(8, 96, generator=g) * 3).to(dtype)
    x[0, :32] = 0.0
    x[1, 5] = -0.0
    q = quantize(x, "mxfp4", mx_scale=mode)
    fq = fake_quantize(x, "mxfp4", mx_scale=mode)
    assert fq.dtype == dtype
    assert torch.equal(bits(fq), bits(q.dequantize(dtype)))
    assert torch.equal(bits(q.dequantize(F32).to(dtype)), bits(fq))


def test_odd_shapes_are_padded():
    """Last dim 45 -> two blocks (padded to 64 with zero codes); decoding strips the pad and
    equals quantizing the explicitly zero-padded tensor."""
    g = torch.Generator().manual_seed(8)
    x = torch.randn(3, 5, 45, generator=g) * 4
    q = quantize(x, "mxfp4")
    assert q.codes().shape == (3, 5, 64) and q.scales.shape == (3, 5, 2)
    assert (q.codes()[..., 45:] == 0).all()
    xp = torch.nn.functional.pad(x, (0, 19))
    s_ref, c_ref, d_ref = reference(xp.reshape(-1, 32), "ceil")
    assert torch.equal(q.scales.view(torch.uint8).flatten(), s_ref)
    assert torch.equal(q.codes().reshape(-1, 32), c_ref)
    d = q.dequantize()
    assert d.shape == x.shape
    assert torch.equal(bits(d), bits(d_ref.reshape(3, 5, 64)[..., :45]))
    assert torch.equal(bits(fake_quantize(x, "mxfp4")), bits(d))


def test_column_blocks_equal_transposed_row_blocks():
    """block=(32, 1) blocks along dim -2: the transpose of row blocks of x.T."""
    g = torch.Generator().manual_seed(9)
    x = torch.randn(45, 7, generator=g)
    d_col = quantize(x, "mxfp4", block=(32, 1)).dequantize()
    d_row = quantize(x.T.contiguous(), "mxfp4", block=(1, 32)).dequantize()
    assert d_col.shape == x.shape
    assert torch.equal(bits(d_col), bits(d_row.T.contiguous()))
