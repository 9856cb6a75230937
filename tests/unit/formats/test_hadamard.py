"""Random Hadamard transform (hadamard.py): the matrix, the butterfly, round trips, sign
policies, outlier spreading, and how ``quantize(..., rht=...)`` uses it.

References: docs/numerics.md, Random Hadamard transform (TE's R = diag(s) H16 / 4, sign vector
0xD7E8, amax after the transform, BF16 output) and paper App. C (Eq. 6).
"""
from __future__ import annotations

import math

import pytest
import torch

from nvfp4_lab.formats import RHTSpec, Stream, hadamard_matrix, quantize, rht, sign_vector
from nvfp4_lab.formats.hadamard import fwht

SIZES = [2, 4, 8, 16, 32, 64, 128, 256]
U32 = 2.0 ** -24  # unit roundoff of fp32 (24-bit significand)
U_BF16 = 2.0 ** -8  # unit roundoff of bf16 (8-bit significand)
TE_SIGNS_16 = [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1]


def sylvester(d: int) -> torch.Tensor:
    """Unnormalised Sylvester matrix by the Kronecker recursion H_2n = [[H, H], [H, -H]]
    (an independent construction from the popcount formula used in the library)."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- the matrix

@pytest.mark.parametrize("d", SIZES)
def test_hadamard_matrix_is_normalised_sylvester(d):
    h = hadamard_matrix(d, torch.float64)
    assert torch.equal(torch.sign(h), sylvester(d))
    assert torch.equal(h.abs(), torch.full((d, d), 1.0 / math.sqrt(d), dtype=torch.float64))
    assert torch.equal(h, h.T)


@pytest.mark.parametrize("d", SIZES)
def test_hadamard_matrix_orthogonal(d):
    eye = torch.eye(d, dtype=torch.float64)
    h32 = hadamard_matrix(d)
    assert h32.dtype == torch.float32
    if (d.bit_length() - 1) % 2 == 0:
        # d = 4^j: entries are +-2^-j, every product is exactly 1/d, every partial sum is a
        # multiple of 1/d of magnitude <= 1: the fp32 matmul is exact.
        assert torch.equal(h32 @ h32.T, eye.float())
    else:
        # fp32(1/sqrt(d)) carries one rounding (rel. <= u), so the diagonal d * c^2 is within
        # 2u of 1; off-diagonal sums of +-c^2 cancel exactly in float64 (c^2 has 48 bits,
        # partial sums at most 56 -> allow a few float64 ulps).
        p = h32.double() @ h32.double().T
        assert (p.diagonal() - 1).abs().max() <= 2 * U32
        assert (p - torch.diag(p.diagonal())).abs().max() <= 1e-14
    h64 = hadamard_matrix(d, torch.float64)
    # float64: d equal-magnitude terms per dot product, error <= d * eps64
    assert (h64 @ h64.T - eye).abs().max() <= d * torch.finfo(torch.float64).eps


@pytest.mark.parametrize("d", [0, 1, 3, 12, 48, 512])
def test_bad_sizes_raise(d):
    with pytest.raises(ValueError, match="power of two"):
        hadamard_matrix(d)
    with pytest.raises(ValueError):
        sign_vector(d)


# --------------------------------------------------------------------------- butterfly

@pytest.mark.parametrize("d", SIZES)
def test_fwht_equals_sylvester_product_on_integers(d):
    # integers |x| <= 100: every partial sum is an integer < 2^24, exact in fp32
    x = torch.randint(-100, 101, (3, 5, d), generator=gen(d)).float()
    expected = (x.double() @ sylvester(d)).float()
    assert torch.equal(fwht(x), expected)


def test_rht_is_v_times_diag_s_times_h_over_4():
    """TE's R = diag(s) . H16 . 0.25 with the signs on the rows: v R = ((v * s) H) / 4.
    Integer inputs keep everything exact, so the check is bitwise."""
    s = torch.tensor(TE_SIGNS_16, dtype=torch.float64)
    x = torch.randint(-50, 51, (7, 32), generator=gen(1)).float()
    chunks = x.double().reshape(7, 2, 16)
    expected = ((chunks * s) @ sylvester(16) / 4).reshape(7, 32).float()
    assert torch.equal(rht(x, 16), expected)
    assert torch.equal(rht(x.T.contiguous(), 16, axis=0), expected.T)


# --------------------------------------------------------------------------- round trips

@pytest.mark.parametrize("d", SIZES)
@pytest.mark.parametrize("axis", [0, -1])
def test_rht_inverse_roundtrip_fp32(d, axis):
    """Relative 2-norm error per chunk <= (2k + 4) u, k = log2 d: each butterfly stage rounds
    every output once (relative u in 2-norm, and later stages are scaled orthogonal maps that
    preserve it), k stages + the 1/sqrt(d) multiply each way, + 2u for fp32(1/sqrt(d))^2 != 1/d
    when d is not a power of four. Signs are exact."""
    k = d.bit_length() - 1
    g = gen(100 + d)
    x = torch.randn(4 * d, 6, generator=g) * torch.exp(2 * torch.randn(4 * d, 6, generator=g))
    if axis == -1:
        x = x.T.contiguous()
    y = rht(x, d, axis=axis, signs="per_call", seed=3)
    assert not torch.allclose(y, x)
    back = rht(y, d, axis=axis, signs="per_call", seed=3, inverse=True)
    xc = x.movedim(axis, -1).reshape(-1, d).double()
    err = (back.movedim(axis, -1).reshape(-1, d).double() - xc).norm(dim=-1)
    assert (err <= (2 * k + 4) * U32 * xc.norm(dim=-1)).all()


@pytest.mark.parametrize("d", [2, 16, 256])
def test_rht_inverse_roundtrip_bf16(d):
    """BF16 in, BF16 out: the forward result is rounded to bf16 (rel. 2-norm error <= u_bf16),
    the inverse sees that error through an orthogonal map and rounds once more to bf16:
    total <= 2 u_bf16 (1 + u_bf16) + the fp32 terms of the test above."""
    k = d.bit_length() - 1
    x = torch.randn(8 * d, 4, generator=gen(d)).bfloat16()
    y = rht(x, d, axis=0)
    assert y.dtype == torch.bfloat16
    back = rht(y, d, axis=0, inverse=True)
    assert back.dtype == torch.bfloat16
    xc = x.float().T.reshape(-1, d).double()
    err = (back.float().T.reshape(-1, d).double() - xc).norm(dim=-1)
    bound = 2 * U_BF16 * (1 + U_BF16) + (2 * k + 4) * U32
    assert (err <= bound * xc.norm(dim=-1)).all()


@pytest.mark.parametrize("d", [4, 16, 64])
def test_transform_both_operands_preserves_product(d):
    """(A R)(B R)^T = A B^T (Eq. 6). Error vs the float64 product: the transformed rows carry
    relative error <= (k + 1) u each (first order: 2 (k + 1) u |a||b| in the product), and the
    fp32 K-term dot product adds <= K u sum|p_l q_l| <= K u |a||b| (Cauchy-Schwarz)."""
    k, K = d.bit_length() - 1, 128
    g = gen(d)
    a = torch.randn(8, K, generator=g) * 3
    b = torch.randn(6, K, generator=g)
    a[:, 5] *= 40  # outlier channel
    exact = a.double() @ b.double().T
    bound = (2 * (k + 1) + K) * U32 * (a.double().norm(dim=1)[:, None] * b.double().norm(dim=1))
    for policy in ("fixed", "per_call", "none"):
        c = rht(a, d, signs=policy, seed=7) @ rht(b, d, signs=policy, seed=7).T
        assert ((c.double() - exact).abs() <= bound).all()
    # sensitivity: different sign vectors on the two operands do not cancel
    s1, s2 = sign_vector(d, "per_call", seed=1), sign_vector(d, "per_call", seed=2)
    c = rht(a, d, signs=s1) @ rht(b, d, signs=s2).T
    assert ((c.double() - exact).abs() > bound).any()


# --------------------------------------------------------------------------- sign policies

def test_te_fixed_sign_vector_16():
    expected = torch.tensor(TE_SIGNS_16, dtype=torch.float32)
    for seed, layer, step, call in [(0, 0, 0, 0), (5, 3, 9, 2), (2**40, 7, 1, 1)]:
        assert torch.equal(sign_vector(16, "fixed", seed, layer, step, call), expected)
    assert torch.equal(sign_vector(16), expected)  # the default policy


@pytest.mark.parametrize("d", [2, 16, 64, 256])
def test_policy_none_is_all_ones(d):
    assert torch.equal(sign_vector(d, "none", seed=9, layer=1, step=2, call=3), torch.ones(d))
    x = torch.randn(3, d, generator=gen(0))
    assert torch.equal(rht(x, d, signs="none"), rht(x, d, signs=torch.ones(d)))


@pytest.mark.parametrize("d", [32, 64, 256])
def test_sign_policies_depend_on_the_right_ids(d):
    """Drawn vectors: +-1 only, a pure function of (seed, ids the policy uses), blind to
    the ids it ignores. With d >= 32 a chance collision has probability <= 2^-32."""
    def sv(policy, seed=0, layer=0, step=0, call=0):
        return sign_vector(d, policy, seed=seed, layer=layer, step=step, call=call)

    for policy in ("fixed", "per_layer", "per_step", "per_call"):
        v = sv(policy, seed=11, layer=2, step=3, call=4)
        assert v.shape == (d,) and set(v.tolist()) <= {-1.0, 1.0}
        assert torch.equal(v, sv(policy, seed=11, layer=2, step=3, call=4))  # reproducible
        assert not torch.equal(v, sv(policy, seed=12, layer=2, step=3, call=4))  # seed
        assert 0 < int((v < 0).sum()) < d
    same, diff = torch.equal, lambda a, b: not torch.equal(a, b)
    assert same(sv("fixed", layer=0), sv("fixed", layer=5, step=6, call=7))
    assert diff(sv("per_layer", layer=0), sv("per_layer", layer=1))
    assert same(sv("per_layer", layer=1, step=0), sv("per_layer", layer=1, step=9, call=4))
    assert diff(sv("per_step", step=0), sv("per_step", step=1))
    assert diff(sv("per_step", layer=0, step=1), sv("per_step", layer=1, step=1))
    assert same(sv("per_step", step=1, call=0), sv("per_step", step=1, call=3))
    assert diff(sv("per_call", call=0), sv("per_call", call=1))
    assert diff(sv("per_call", step=0, call=1), sv("per_call", step=1, call=1))


def test_quantize_picks_signs_from_the_stream():
    x = torch.randn(64, 8, generator=gen(3))
    spec = dict(axis=0, rht=RHTSpec(16, "per_step", seed=4))
    q1 = quantize(x, "nvfp4", stream=Stream(step=1), **spec)
    q1b = quantize(x, "nvfp4", stream=Stream(step=1, call=5), **spec)
    q2 = quantize(x, "nvfp4", stream=Stream(step=2), **spec)
    assert torch.equal(q1.rht_signs, sign_vector(16, "per_step", seed=4, step=1))
    assert torch.equal(q1.data, q1b.data)
    assert not torch.equal(q1.rht_signs, q2.rht_signs)
    assert not torch.equal(q1.data, q2.data)
    qf = quantize(x, "nvfp4", axis=0, rht=16, stream=Stream(layer=3, step=8))
    assert torch.equal(qf.rht_signs, torch.tensor(TE_SIGNS_16, dtype=torch.float32))


# --------------------------------------------------------------------------- outliers

def _spiky(rows=256, cols=32, m=40.0, seed=0):
    """N(0,1) with one spike of magnitude m (random sign/position) per 16-row chunk."""
    g = gen(seed)
    x = torch.randn(rows, cols, generator=g)
    pos = torch.randint(0, 16, (rows // 16, cols), generator=g)
    pos += 16 * torch.arange(rows // 16)[:, None]
    sign = torch.where(torch.rand(rows // 16, cols, generator=g) < 0.5, -1.0, 1.0)
    x[pos, torch.arange(cols).expand_as(pos)] = m * sign
    return x


def _crest(x):  # max/rms per 16-chunk along dim 0 -> [n_chunks * cols]
    c = x.reshape(-1, 16, x.shape[1])
    return (c.abs().amax(1) / c.pow(2).mean(1).sqrt()).flatten()


def test_rht_reduces_crest_factor():
    """Chunk = spike M plus Gaussian rest g. Before: crest = M / rms with rms = |v|/4, i.e.
    4 / sqrt(1 + |g|^2/M^2) > 3 while |g| < 0.88 M (|g|^2 ~ chi2_15, M = 40: never).
    After: each output is +-M/4 plus a column of R times g, |.| <= |g|, so
    crest <= (M + 4|g|) / sqrt(M^2 + |g|^2) < 2 while |g| < ~11.5 (chi2_15 > 130: never)."""
    x = _spiky()
    before, after = _crest(x), _crest(rht(x, 16, axis=0))
    assert (before > 3.0).all()
    assert (after < 2.0).all()


def test_rht_lowers_nvfp4_error_on_a_spike_tensor():
    """One spike M in an N(0,1) tensor, so large that every other block's E4M3 scale,
    a_b * 448 / M, falls below 2^-10 and rounds to 0 (all those blocks decode to 0). The RHT
    spreads the spike over its 16-chunk: the tensor amax drops to <= M/4 + |g_chunk| (a
    column of R has unit norm), so the other blocks' scales grow 4x, above the E4M3
    subnormal 2^-9 / 2: they are kept. Fixed seed; error measured in the original space."""
    x = torch.randn(64, 32, generator=gen(0))
    block_amax = x.abs().reshape(4, 16, 32).amax(1).max()
    m = float(448 * 1024 * block_amax * 1.01)
    x[0, 0] = m
    chunk = x[:16, 0].clone()
    chunk[0] = 0

    plain = quantize(x, "nvfp4", axis=0)
    deq_plain = plain.dequantize()
    q = quantize(x, "nvfp4", axis=0, rht=16)
    deq_rht = rht(q.dequantize(), 16, axis=0, inverse=True)

    rest = torch.ones_like(x, dtype=torch.bool)
    rest[:16, 0] = False
    assert (deq_plain[rest] == 0).all()  # flushed: error >= |background|
    assert q.amax <= m / 4 + chunk.norm() * (1 + 1e-6)
    assert (q.scales.float().reshape(32, 4) > 0).all()
    err_plain, err_rht = (deq_plain - x).norm(), (deq_rht - x).norm()
    assert err_rht < 0.25 * err_plain, (err_rht, err_plain)


# --------------------------------------------------------------------------- quantize(rht=)

def test_quantize_rht_amax_after_transform_fp32():
    x = torch.randn(64, 24, generator=gen(5))
    x[3, 4] = 30.0
    q = quantize(x, "nvfp4", axis=0, rht=16)
    rotated = rht(x, 16, axis=0)
    assert torch.equal(q.amax, rotated.abs().max())
    assert q.amax != x.abs().max()
    # the stored tensor is the quantized rotated tensor
    ref = quantize(rotated, "nvfp4", axis=0)
    assert torch.equal(q.dequantize(), ref.dequantize())
    assert torch.equal(q.scales.view(torch.uint8), ref.scales.view(torch.uint8))


def test_quantize_rht_bf16_rounds_after_transform():
    x = torch.randn(64, 24, generator=gen(6)).bfloat16()
    q = quantize(x, "nvfp4", axis=0, rht=16)
    rotated = rht(x, 16, axis=0)
    assert rotated.dtype == torch.bfloat16
    assert torch.equal(q.amax, rotated.float().abs().max())
    # discriminating: the unrounded fp32 rotation has a different amax
    assert q.amax != rht(x.float(), 16, axis=0).abs().max()
    assert torch.equal(q.dequantize(), quantize(rotated, "nvfp4", axis=0).dequantize())


def test_rht_axis_not_divisible_raises():
    x = torch.randn(24, 8)
    with pytest.raises(ValueError, match=r"RHT size 16.*dim 0.*24"):
        quantize(x, "nvfp4", axis=0, rht=16)
    with pytest.raises(ValueError, match=r"16.*dim 0"):
        rht(x, 16, axis=0)
    with pytest.raises(ValueError, match=r"RHT size 32.*dim -1"):
        quantize(torch.randn(4, 48), "nvfp4", rht=32)


def test_rht_with_2d_tiles_raises():
    with pytest.raises(ValueError, match="rht"):
        quantize(torch.randn(32, 32), "nvfp4", block=(16, 16), rht=16)
