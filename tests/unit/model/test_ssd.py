"""The chunked SSD scan against its recurrence (the reference, float64, one token at a time).

The tolerance is derived, not tuned. Each output of the scan is a sum of products
y_t = sum_s (C_t . B_s) exp(a_{s+1} + ... + a_t) dt_s x_s. In float32 every product carries a
relative error of a few units of u = 2^-24 from its factors; the sums (over N for C.B, over up
to T tokens and chunk states) add at most (T + N) u relative to the sum of |terms|; and the
exponent, formed from chunk-local cumulative sums of up to T terms a_k, has an absolute error
up to T u |a|_sum, which exp turns into the same relative error. So

    |chunked - exact| <= c u (T + N + T max|cumsum a|) * sum_s |terms|

with c = 8 covering the handful of roundings per product. sum |terms| is the recurrence run on
|x|, |B|, |C| (every term then positive). The bound is loose by orders of magnitude in practice,
and still fails for any real error (a wrong decay, a term from the wrong chunk: O(1) relative).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from nvfp4_lab.model.ssd import segment_sums, ssd_chunked, ssd_recurrent

U32 = 2.0 ** -24


def inputs(b=2, T=50, H=4, P=8, G=2, N=16, *, dt_scale=1.0, A_range=(0.5, 4.0), seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, T, H, P, generator=g)
    dt = F.softplus(torch.randn(b, T, H, generator=g)) * dt_scale
    A = -(torch.rand(H, generator=g) * (A_range[1] - A_range[0]) + A_range[0])
    B = torch.randn(b, T, G, N, generator=g)
    C = torch.randn(b, T, G, N, generator=g)
    return x, dt, A, B, C


def bound(x, dt, A, B, C) -> torch.Tensor:
    """The module docstring's error bound, per output."""
    T, N = x.shape[1], B.shape[-1]
    terms = ssd_recurrent(x.abs(), dt, A, B.abs(), C.abs())
    cumsum = (dt.double() * A.double()).cumsum(1).abs().max().item()
    return 8 * U32 * (T + N + T * cumsum) * terms


@pytest.mark.parametrize("chunk", [1, 3, 16, 50, 64])
@pytest.mark.parametrize("shape", [
    dict(T=50, H=4, G=2),      # T not a multiple of most chunks: padded
    dict(T=1, H=2, G=1),       # a single token
    dict(T=33, H=6, G=3, P=4, N=8),
    dict(T=40, H=4, G=4),      # one head per group
])
def test_chunked_equals_recurrent(chunk, shape):
    x, dt, A, B, C = inputs(**shape)
    got = ssd_chunked(x, dt, A, B, C, chunk).double()
    want = ssd_recurrent(x, dt, A, B, C)
    assert got.shape == want.shape
    assert ((got - want).abs() <= bound(x, dt, A, B, C)).all()


@pytest.mark.parametrize("case", ["fast_decay", "no_decay", "tiny_dt", "huge_x", "zeros"])
def test_chunked_equals_recurrent_at_the_edges(case):
    """Decays of exp(-80) per token (states forgotten at once); A * dt ~ 0 (a pure running
    sum over 96 tokens); dt ~ 1e-6; inputs of 1e30 (fp32 range, squared would overflow);
    all-zero inputs (exactly zero out)."""
    kw = {"fast_decay": dict(dt_scale=20.0, A_range=(4.0, 16.0)),
          "no_decay": dict(A_range=(1e-6, 2e-6)),
          "tiny_dt": dict(dt_scale=1e-6)}.get(case, {})
    x, dt, A, B, C = inputs(T=96, **kw)
    if case == "huge_x":
        x = x * 1e30
    if case == "zeros":
        x, B = torch.zeros_like(x), torch.zeros_like(B)
    got = ssd_chunked(x, dt, A, B, C, 32).double()
    want = ssd_recurrent(x, dt, A, B, C)
    assert torch.isfinite(got).all()
    assert ((got - want).abs() <= bound(x, dt, A, B, C)).all()
    if case == "zeros":
        assert torch.equal(got, torch.zeros_like(got))


def test_bf16_inputs_come_back_bf16_rounded_once():
    """The scan runs in float32 whatever the input dtype: bf16 inputs give the float32 scan of
    the same (bf16-valued) inputs, rounded to bf16 once at the end."""
    x, dt, A, B, C = inputs(T=64)
    x, B, C = x.bfloat16(), B.bfloat16(), C.bfloat16()
    got = ssd_chunked(x, dt, A, B, C, 16)
    assert got.dtype == torch.bfloat16
    fp32 = ssd_chunked(x.float(), dt, A, B.float(), C.float(), 16)
    assert torch.equal(got, fp32.bfloat16())


def test_autocast_does_not_lower_the_scan():
    """Under bf16 autocast (trainer=gpu's precision) the einsums would run in bf16; the scan
    turns autocast off, so its result is the float32 one, bit for bit."""
    x, dt, A, B, C = inputs(T=64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = ssd_chunked(x, dt, A, B, C, 16)
    assert got.dtype == torch.float32
    assert torch.equal(got, ssd_chunked(x, dt, A, B, C, 16))


def test_causal_exactly():
    """Changing token t (x, dt, B, C) leaves every output before t bit-identical."""
    x, dt, A, B, C = inputs(T=80)
    base = ssd_chunked(x, dt, A, B, C, 16)
    for t in (0, 15, 16, 47, 79):
        x2, dt2, B2, C2 = x.clone(), dt.clone(), B.clone(), C.clone()
        x2[:, t] += 3.0
        dt2[:, t] *= 5.0
        B2[:, t] -= 2.0
        C2[:, t] += 1.0
        out = ssd_chunked(x2, dt2, A, B2, C2, 16)
        assert torch.equal(out[:, :t], base[:, :t])
        assert not torch.equal(out[:, t:], base[:, t:])


def test_gradients_match_the_recurrence():
    """Backward through the chunked form (autograd through its einsums and masks) equals the
    recurrence's backward, for every input, within a float32 tolerance of the gradient's scale:
    a masked -inf that leaked a NaN, or a decay differentiated wrongly, would fail."""
    x, dt, A, B, C = inputs(T=40)
    weights = torch.randn(*x.shape, dtype=torch.float64)
    grads = []
    for fn in (lambda *a: ssd_chunked(*a, chunk=16).double(), ssd_recurrent):
        leaves = [t.clone().double().requires_grad_() for t in (x, dt, A, B, C)]
        args = leaves if fn is ssd_recurrent else [t.float() for t in leaves]
        (fn(*args) * weights).sum().backward()
        grads.append([t.grad for t in leaves])
    for name, got, want in zip("x dt A B C".split(), *grads):
        assert torch.isfinite(got).all(), name
        scale = want.abs().max()
        assert (got - want).abs().max() <= 1e-4 * scale, name


def test_segment_sums():
    a = torch.tensor([1.0, 2.0, 4.0])
    inf = float("-inf")
    assert torch.equal(segment_sums(a), torch.tensor([[0.0, inf, inf],
                                                      [2.0, 0.0, inf],
                                                      [6.0, 4.0, 0.0]]))
