"""Non-finite input: a block holding NaN or +-Inf decodes to all-NaN (its scale is NaN),
every other block is unaffected, the tensor amax is taken over the finite blocks, and
``QTensor.has_nonfinite`` reports it. NVFP4 1D/2D, MXFP4, FP8 per block and per tensor;
fp32 and bf16 inputs.
"""
from __future__ import annotations

import pytest
import torch

from nvfp4_lab.formats import fake_quantize, quantize

NAN, INF = float("nan"), float("inf")
DTYPES = [torch.float32, torch.bfloat16]
# name -> (quantize kwargs, input shape, slices of the block that gets the non-finite values)
CASES = {
    "nvfp4_1d": (dict(fmt="nvfp4"), (4, 48), (1, slice(16, 32))),
    "nvfp4_1d_axis0": (dict(fmt="nvfp4", axis=0), (48, 4), (slice(16, 32), 2)),
    "nvfp4_2d": (dict(fmt="nvfp4", block=(16, 16)), (32, 48), (slice(16, 32), slice(32, 48))),
    "mxfp4": (dict(fmt="mxfp4"), (4, 96), (2, slice(32, 64))),
    "fp8_block": (dict(fmt="fp8_e4m3", block=(1, 32)), (4, 96), (0, slice(64, 96))),
    "fp8_e5m2_block": (dict(fmt="fp8_e5m2", block=(1, 16)), (4, 48), (3, slice(0, 16))),
    "fp8_tensor": (dict(fmt="fp8_e4m3"), (4, 48), (slice(None), slice(None))),
}
PATTERNS = {"nan": [NAN], "inf": [INF], "-inf": [-INF], "mixed": [NAN, INF, -INF]}


def make(shape, sl, dtype, pattern, seed=0):
    """x with the tensor amax (20) outside the bad block, the bad block's finite values
    small (|.| < 1), and the non-finite values at spread positions in the bad block."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    x[0, -1] = 20.0
    x[sl] = torch.rand(x[sl].shape, generator=g) * 2 - 1
    bad = torch.zeros(shape, dtype=torch.bool)
    bad[sl] = True
    idx = bad.flatten().nonzero().flatten()
    pos = idx[torch.linspace(0, len(idx) - 1, len(PATTERNS[pattern]) + 2).long()[1:-1]]
    flat = x.flatten()
    flat[pos] = torch.tensor(PATTERNS[pattern])
    return flat.view(shape).to(dtype), bad


def fbits(t):
    return t.float().view(torch.int32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("case", CASES)
def test_nonfinite_block_is_nan_and_others_unchanged(case, pattern, dtype):
    kw, shape, sl = CASES[case]
    x, bad = make(shape, sl, dtype, pattern)
    x_ref = x.clone()
    x_ref[bad] = 0  # the bad block zeroed: its finite values do not reach the tensor amax
    q, q_ref = quantize(x, **kw), quantize(x_ref, **kw)

    d = q.dequantize()
    assert torch.isnan(d[bad]).all()
    assert not torch.isfinite(d[~torch.isfinite(x)]).any()
    assert torch.equal(fbits(d[~bad]), fbits(q_ref.dequantize()[~bad]))
    assert torch.isfinite(d[~bad]).all()
    if q.amax is not None:
        assert torch.equal(q.amax, q_ref.amax)
    assert q.has_nonfinite and not q_ref.has_nonfinite
    # exactly one scale (the bad block's) became NaN, the others are bitwise unchanged
    s, s_ref = q.scales.float(), q_ref.scales.float()
    nan_s = torch.isnan(s)
    assert int(nan_s.sum()) == 1
    assert torch.equal(fbits(s[~nan_s]), fbits(s_ref[~nan_s]))
    # fake_quantize decodes identically (in x's dtype)
    fq = fake_quantize(x, kw["fmt"], **{k: v for k, v in kw.items() if k != "fmt"})
    assert fq.dtype == dtype
    assert torch.equal(torch.isnan(fq), torch.isnan(d))
    assert torch.equal(fbits(fq[~bad]), fbits(d.to(dtype)[~bad]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ["nvfp4_1d", "nvfp4_1d_axis0", "nvfp4_2d"])
def test_amax_skips_nonfinite_blocks(case, dtype):
    """The largest finite value (50) sits in the NaN block. A is taken over the finite
    blocks (nvfp4.tensor_amax), so 50 does not count: the other blocks equal quantizing x
    with the whole block zeroed, and differ from quantizing x with only the NaN zeroed."""
    kw, shape, sl = CASES[case]
    x, bad = make(shape, sl, dtype, "nan")
    x[tuple(bad.nonzero()[-1])] = 50.0  # last element of the block (the NaN is not there)
    x_zero = x.clone()
    x_zero[bad] = 0
    q = quantize(x, **kw)
    assert torch.equal(q.amax, x_zero.float().abs().max())
    d = q.dequantize()[~bad]
    assert torch.equal(fbits(d), fbits(quantize(x_zero, **kw).dequantize()[~bad]))
    x_nan0 = torch.nan_to_num(x, nan=0.0)
    assert not torch.equal(fbits(d), fbits(quantize(x_nan0, **kw).dequantize()[~bad]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_finite_input_has_no_nonfinite(case, dtype):
    kw, shape, _ = CASES[case]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(dtype) * 1e4
    q = quantize(x, **kw)
    assert not q.has_nonfinite
    assert torch.isfinite(q.dequantize()).all()


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_all_nonfinite_tensor(fmt):
    """Nothing finite: A = 0 over the empty set of finite values; every block is NaN."""
    x = torch.tensor([[NAN, INF] * 16, [-INF] * 32])
    q = quantize(x, fmt)
    assert q.has_nonfinite
    assert torch.isnan(q.dequantize()).all()
    if q.amax is not None:
        assert q.amax.item() == 0.0


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_nonfinite_with_sr(fmt):
    x, bad = make((4, 64), (1, slice(0, 32)), torch.float32, "mixed")
    q = quantize(x, fmt, block=(1, 32), rounding="sr", seed=2)
    d = q.dequantize()
    assert torch.isnan(d[bad]).all() and torch.isfinite(d[~bad]).all()
    assert q.has_nonfinite
