"""Hypothesis properties of the FP4 quantizers: idempotence, sign symmetry, power-of-two
scale invariance, 2D-tile transpose symmetry, padding, and the block axis.

Inputs are drawn as (shape, seed, distribution, binade) and built with a seeded torch
generator, so examples are cheap and shrink to readable parameters. All comparisons are
bitwise (int32 / uint8 views), with -0.0 and +0.0 told apart unless a test says otherwise.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nvfp4_lab.formats import quantize
from nvfp4_lab.formats.blocks import canonical

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)
GRID_MID = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0,
                         5.0, 6.0])

FP4_SPECS = {
    "nvfp4_1d": dict(fmt="nvfp4"),
    "nvfp4_2d": dict(fmt="nvfp4", block=(16, 16)),
    "mxfp4": dict(fmt="mxfp4"),
}


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.float().view(torch.int32)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(bits(a), bits(b))


def scale_bytes(q) -> torch.Tensor:
    s = q.scales
    return s.view(torch.int32) if s.dtype == torch.float32 else s.view(torch.uint8)


@st.composite
def tensors(draw, max_rows=40, max_cols=72, spread=12, binade=(-30, 30), dims=2):
    """Finite tensors: Gaussian, heavy-tailed (2^+-spread binades), E2M1 ties / grid points
    times powers of two, or sparse with +-0.0; overall scale 2^binade; fp32 or bf16."""
    shape = [draw(st.integers(1, max_rows)) for _ in range(dims - 1)]
    shape.append(draw(st.integers(1, max_cols)))
    seed = draw(st.integers(0, 2**31 - 1))
    kind = draw(st.sampled_from(["normal", "heavy", "grid", "sparse"]))
    e = draw(st.integers(*binade))
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    if kind == "heavy":
        e2 = torch.randint(-spread, spread + 1, shape, generator=g).float()
        x = x.clamp(-8, 8) * torch.exp2(e2)
    elif kind == "grid":
        x = GRID_MID[torch.randint(0, len(GRID_MID), shape, generator=g)]
        x = x * torch.sign(torch.randn(shape, generator=g))
        x = x * torch.exp2(torch.randint(-2, 3, shape, generator=g).float())
    elif kind == "sparse":
        keep = torch.rand(shape, generator=g) < 0.3
        x = torch.where(keep, x, torch.where(torch.rand(shape, generator=g) < 0.5, -0.0, 0.0))
    x = torch.where(x.abs() < 2.0**-20, 0.0 * x, x)  # keep |x| >= 2^-20 or 0 (for scaling)
    return (x * 2.0**e).to(dtype)


# --------------------------------------------------------------------------- idempotence

def element_scales(q) -> torch.Tensor:
    """The fp32 block scale of every element of a [R, C] NVFP4 tensor (blocks along -1)."""
    s, (r, c) = q.scales.float(), q.shape
    b = q.spec.layout.size
    if q.spec.layout.kind == "2d":
        s = s.repeat_interleave(b, 0)
    return s.repeat_interleave(b, -1)[:r, :c]


@pytest.mark.parametrize("name", FP4_SPECS)
@SETTINGS
@given(x=tensors(spread=16))
def test_idempotent(name, x):
    """deq(Q(deq(Q(x)))) == deq(Q(x)). MXFP4 decodes exactly: bitwise, -0.0 included.

    NVFP4: for blocks whose E4M3 scale is normal (>= 2^-6) or 0. The amax element of a
    normal-scale block decodes to code 6 (the scale's rounding error is < 1/16, so y in
    (5.6, 6.4)), the re-derived scale rounds back to the same byte and every code is
    reproduced (checked); a zero-scale block decodes to zeros either way. A subnormal scale
    (TE has no lower clamp) can be off by up to 50 %, the block max then decodes to 4 or 3,
    and requantizing picks a smaller scale: not idempotent, by the format's design. The
    decoded values may move by a few ulps: TE's decode, e2m1 * ((s_b * A) * fp32(1/2688)),
    rounds three times, so the decoded amax element is A only to within ~2 ulps, and the
    second decode uses that amax.
    """
    kw = FP4_SPECS[name]
    q = quantize(x, **kw)
    d = q.dequantize()
    q2 = quantize(d, **kw)
    if kw["fmt"] == "mxfp4":
        assert same_bits(d, q2.dequantize())
        return
    s = element_scales(q)
    ok, normal = (s == 0) | (s >= 2.0**-6), s >= 2.0**-6
    assert torch.equal(canonical_codes(q)[normal], canonical_codes(q2)[normal])
    assert torch.equal(s[normal], element_scales(q2)[normal])
    d2 = q2.dequantize()
    assert ((d2 - d).abs() <= 4 * torch.finfo(torch.float32).eps * d.abs())[ok].all()


def canonical_codes(q) -> torch.Tensor:
    """The E2M1 codes of a [R, C] NVFP4 tensor with the sign of zero dropped, in x's layout."""
    codes = q.codes()
    codes = torch.where((codes & 7) == 0, 0, codes)
    return codes[: q.shape[0], : q.shape[1]]


# --------------------------------------------------------------------------- sign symmetry

SIGN_SPECS = dict(FP4_SPECS, nvfp4_sr=dict(fmt="nvfp4", rounding="sr", seed=3))


@pytest.mark.parametrize("name", SIGN_SPECS)
@SETTINGS
@given(x=tensors())
def test_sign_symmetry(name, x):
    """Q(-x): same scales and amax, codes with bit 3 flipped. Exceptions, by convention:
    NVFP4 (TE) encodes an exact +-0.0 input as code 0 (so no flip there); padding is +0 in
    both. SR bits depend on the index only, so SR is symmetric too."""
    kw = SIGN_SPECS[name]
    q, qn = quantize(x, **kw), quantize(-x, **kw)
    assert torch.equal(scale_bytes(q), scale_bytes(qn))
    if q.amax is not None:
        assert torch.equal(q.amax, qn.amax)
    layout = q.spec.layout
    real = canonical(torch.ones(x.shape), layout, 2) != 0
    xc = canonical(x.float(), layout, 2)
    c, cn = q.codes(), qn.codes()
    flip = real if kw["fmt"] == "mxfp4" else real & (xc != 0)
    assert torch.equal(cn[flip], c[flip] ^ 8)
    assert (c[real & ~flip] == 0).all() and (cn[real & ~flip] == 0).all()
    assert torch.equal(c[~real], cn[~real])
    d, dn = q.dequantize(), qn.dequantize()
    assert same_bits(d.abs(), dn.abs())
    nz = d != 0
    assert torch.equal(torch.signbit(dn[nz]), ~torch.signbit(d[nz]))


# --------------------------------------------------------------------------- scale invariance

@pytest.mark.parametrize("name", SIGN_SPECS)
@SETTINGS
@given(x=tensors(spread=12, binade=(-30, 30)), k=st.integers(-40, 40))
def test_power_of_two_scale_invariance(name, x, k):
    """Q(2^k x) decodes to exactly 2^k deq(Q(x)): NVFP4's S_enc, block scale products and
    A/2688 all move by an exact 2^-k / 2^k (E4M3 bytes unchanged); MXFP4's exponents shift by
    k. Range: |x| in [2^-62, 2^45] or 0 and |k| <= 40 keeps every input, amax, S_enc and
    decoded value a normal fp32 number (smallest decoded value >= 2^-10 * A / 2688)."""
    kw = SIGN_SPECS[name]
    q, qk = quantize(x, **kw), quantize(x * 2.0**k, **kw)
    assert torch.equal(q.data, qk.data)
    if kw["fmt"] == "nvfp4":
        assert torch.equal(scale_bytes(q), scale_bytes(qk))
    assert same_bits(q.dequantize() * 2.0**k, qk.dequantize())


# --------------------------------------------------------------------------- 2D tiles

@pytest.mark.parametrize("fmt,b", [("nvfp4", 16), ("mxfp4", 32)])
@SETTINGS
@given(w=tensors(max_rows=70, max_cols=70))
def test_2d_tiles_transpose(fmt, b, w):
    """A b x b tile shares one scale, so Q(w^T) is the exact transpose of Q(w) (codes,
    scales, decoded values)."""
    q, qt = quantize(w, fmt, block=(b, b)), quantize(w.T, fmt, block=(b, b))
    assert same_bits(qt.dequantize(), q.dequantize().T)
    assert torch.equal(scale_bytes(qt), scale_bytes(q).T)
    assert torch.equal(qt.codes(), q.codes().T)


# --------------------------------------------------------------------------- padding

PAD_SPECS = dict(FP4_SPECS, fp8_block=dict(fmt="fp8_e4m3", block=(1, 32)),
                 fp8_tensor=dict(fmt="fp8_e5m2"))


@pytest.mark.parametrize("name", PAD_SPECS)
@SETTINGS
@given(x=tensors(max_rows=35, max_cols=70), extra=st.integers(0, 2), extra_rows=st.integers(0, 20))
def test_padding_equals_explicit_zero_padding(name, x, extra, extra_rows):
    """Quantizing an odd shape equals quantizing the zero-padded tensor (any amount of
    padding: zeros never raise an amax) and keeping the original region."""
    kw = PAD_SPECS[name]
    r, c = x.shape
    b = 32 if kw["fmt"] == "mxfp4" else 16
    xp = torch.zeros(r + extra_rows, -(-c // b) * b + extra * b, dtype=x.dtype)
    xp[:r, :c] = x
    q, qp = quantize(x, **kw), quantize(xp, **kw)
    assert same_bits(qp.dequantize()[:r, :c], q.dequantize())
    if q.amax is not None:
        assert torch.equal(q.amax, qp.amax)
    s, sp = scale_bytes(q), scale_bytes(qp)
    if kw.get("block") == (16, 16) or kw["fmt"] == "fp8_e5m2":
        region = sp[tuple(slice(0, n) for n in s.shape)]
    else:  # 1D blocks along the last dim: [rows, blocks]
        region = sp[:r, : s.shape[1]]
    assert torch.equal(region, s)


# --------------------------------------------------------------------------- axis

AXIS_SPECS = dict(nvfp4=dict(fmt="nvfp4"), mxfp4=dict(fmt="mxfp4"),
                  nvfp4_v2_8=dict(fmt="nvfp4", order="te_v2_8"),
                  fp8_block=dict(fmt="fp8_e4m3", block=(1, 32)))


@pytest.mark.parametrize("name", AXIS_SPECS)
@SETTINGS
@given(x=tensors(max_rows=40, max_cols=40), three_d=st.booleans(), data=st.data())
def test_axis_equals_moving_the_axis_last(name, x, three_d, data):
    """Q(x, axis=a) == Q(x moved so a is last) moved back: decoded values and scales."""
    kw = AXIS_SPECS[name]
    if three_d:
        signs = torch.tensor([1.0, -0.5]).view(2, 1, 1).to(x.dtype)
        x = x.reshape(1, *x.shape).expand(2, -1, -1) * signs
    axis = data.draw(st.integers(0, x.dim() - 1))
    q = quantize(x, axis=axis, **kw)
    ql = quantize(x.movedim(axis, -1).contiguous(), **kw)
    assert same_bits(q.dequantize(), ql.dequantize().movedim(-1, axis))
    assert torch.equal(scale_bytes(q), scale_bytes(ql))
    if x.dim() == 2 and axis == 0:
        assert same_bits(q.dequantize(), quantize(x.T, **kw).dequantize().T)


@SETTINGS
@given(x=tensors(max_rows=40, max_cols=40))
def test_column_blocks_are_axis_minus_2(x):
    """block=(16, 1) is 1D along dim -2, i.e. axis=0 for a matrix."""
    a = quantize(x, "nvfp4", block=(16, 1))
    b = quantize(x, "nvfp4", axis=0)
    assert same_bits(a.dequantize(), b.dequantize())
    assert torch.equal(a.data, b.data)
