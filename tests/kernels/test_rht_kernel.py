"""The Triton RHT butterfly against the reference ``formats.hadamard.rht_dim``: equal bits."""
from __future__ import annotations

import pytest
import torch

from nvfp4_kernels.rht import rht_2d
from nvfp4_lab.formats.hadamard import rht_dim, sign_vector

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16}


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit patterns, except that any two NaNs match (payloads are not specified)."""
    nan = torch.isnan(a)
    if not torch.equal(nan, torch.isnan(b)):
        return False
    return torch.equal(a[~nan].view(BITS[a.dtype]), b[~nan].view(BITS[b.dtype]))


def sample(rows: int, cols: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Normal bulk with per-row magnitudes over ~20 binades (chunks along dim 0 mix them, so
    partial sums are inexact and the addition order matters), plus zeros and -0.0."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g) * torch.exp(4 * torch.randn(rows, 1, generator=g))
    x[:, 0] = 0.0
    x[:, 1] = -0.0
    return x.to(device=DEVICE, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("d", [2, 4, 16, 32])
def test_rht_matches_the_reference_bit_for_bit(d, axis, dtype):
    x = sample(64, 40, dtype) if axis == 0 else sample(40, 64, dtype)  # 40: a partial tile
    signs = sign_vector(d, "per_call", seed=5, layer=2, step=3)
    assert same_bits(rht_2d(x, signs, axis), rht_dim(x, signs.to(DEVICE), axis))


def test_rht_size_128_and_te_signs():
    x = sample(256, 24, torch.bfloat16, seed=1)
    for d in (16, 128):
        signs = sign_vector(d, "fixed")
        assert same_bits(rht_2d(x, signs, 0), rht_dim(x, signs.to(DEVICE), 0))


def test_rht_non_finite_and_overflow():
    # a NaN or Inf spreads over its chunk as in the reference; 3e38 + 3e38 overflows to inf
    x = sample(32, 16, torch.float32, seed=2)
    x[0, 2], x[17, 3], x[5, 4], x[6, 4] = float("nan"), float("inf"), 3e38, 3e38
    signs = sign_vector(16, "none")
    got, want = rht_2d(x, signs, 0), rht_dim(x, signs.to(DEVICE), 0)
    assert torch.isinf(want[:, 4]).any() and torch.isnan(want[:16, 2]).all()
    assert same_bits(got, want)
    xb = x.to(torch.bfloat16)
    assert same_bits(rht_2d(xb, signs, 1), rht_dim(xb, signs.to(DEVICE), 1))


def test_rht_rejects_what_it_does_not_cover():
    with pytest.raises(NotImplementedError, match="2D fp32/bf16"):
        rht_2d(torch.zeros(2, 16, 16, device=DEVICE), sign_vector(16), 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_rht_realistic_shapes_on_gpu():
    x = sample(8192, 1024, torch.bfloat16, seed=3)
    for d in (16, 128):
        signs = sign_vector(d, "fixed")
        assert same_bits(rht_2d(x, signs, 0), rht_dim(x, signs.to(DEVICE), 0))
