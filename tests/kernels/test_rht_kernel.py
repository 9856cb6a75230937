"""The RHT fused into the FP4 kernels (``nvfp4_kernels.rht``) against the reference.

``fp4_quantize`` rotates each tile it loads and quantizes the result; the reference
(``formats``) rotates the whole tensor with ``rht_dim`` and quantizes that. Equal outputs need
the same FP32 additions in the same order, the same rounding to the input dtype, and tiles
that hold whole chunks. The inputs make that matter: magnitudes spread over ~20 binades along
the transform axis, so partial sums are inexact and any other summation order changes bits.
Every output is compared: local (int32 bits), codes, scale bytes, amax.
"""
from __future__ import annotations

from unittest import mock

import pytest
import torch
from helpers.kernel_cases import (
    DEVICE,
    F32,
    NAN,
    WGRAD_STREAM,
    assert_bits_equal,
    gen,
    interpreter_warnings,
    needs_cuda,
    realistic_wgrad,
)

import nvfp4_kernels
from nvfp4_kernels import fp4
from nvfp4_lab.formats import QuantSpec, Stream, fake_quantize_parts, quantize
from nvfp4_lab.formats.hadamard import sign_vector
from nvfp4_lab.formats.spec import RHTSpec

pytestmark = interpreter_warnings
F16, BF16 = torch.float16, torch.bfloat16


def spread(rows: int, cols: int, axis: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Normal values times e^(4 N(0,1)) per index along ``axis`` (the transform axis), with a
    zero and a -0.0 line across it."""
    g = gen(seed)
    shape = (rows, 1) if axis == 0 else (1, cols)
    x = torch.randn(rows, cols, generator=g) * torch.exp(4 * torch.randn(shape, generator=g))
    if axis == 0:
        x[:, 0], x[:, 1] = 0.0, -0.0
    else:
        x[0], x[1] = 0.0, -0.0
    return x.to(device=DEVICE, dtype=dtype)


def check(x: torch.Tensor, spec: QuantSpec, seed: int = 0, stream: Stream | None = None,
          signs: torch.Tensor | None = None) -> None:
    """Both outputs of one fused launch against the reference's two calls."""
    key, rht_signs = nvfp4_kernels.runtime_inputs(x, spec, seed, stream, signs)
    out = fp4.fp4_quantize(x, spec, key, rht_signs, local=True, codes=fp4.stores(spec))
    ref_local, ref_amax = fake_quantize_parts(x, spec, seed=seed, stream=stream, signs=signs)
    assert_bits_equal(out.local, ref_local)
    if ref_amax is not None:
        assert_bits_equal(out.amax, ref_amax, "amax")
    if fp4.stores(spec):
        ref = quantize(x, spec, seed=seed, stream=stream, signs=signs)
        assert torch.equal(out.data, ref.data), "codes differ"
        assert torch.equal(out.scales.view(torch.uint8), ref.scales.view(torch.uint8))
        if ref.amax is not None:
            assert_bits_equal(out.amax, ref.amax, "amax")


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("d", [2, 4, 16, 32, 128])
def test_rht_then_nvfp4_matches_the_reference(d, axis, dtype):
    # 40: a partial tile across the transform axis; 128 along it: whole chunks of every d
    x = spread(128, 40, 0, dtype) if axis == 0 else spread(40, 128, 1, dtype)
    spec = QuantSpec("nvfp4", axis=axis, rht=d)
    plain_local, _ = fake_quantize_parts(x, QuantSpec("nvfp4", axis=axis))
    assert not torch.equal(fake_quantize_parts(x, spec)[0], plain_local)  # the RHT matters
    check(x, spec, signs=sign_vector(d, "per_call", seed=5, layer=2, step=3))


def test_largest_sizes_fp16_and_mxfp4():
    """d = 256 along the rows and the tokens (tiles of 256 rows), fp16 input (rounded with
    the cast), MXFP4 with 32-element blocks under 64- and 16-point transforms."""
    check(spread(512, 16, 0, F32, seed=1), QuantSpec("nvfp4", axis=0, rht=256))
    check(spread(8, 256, 1, F16, seed=2), QuantSpec("nvfp4", rht=RHTSpec(256, "per_layer", seed=3)))
    check(spread(64, 24, 0, F16, seed=3), QuantSpec("mxfp4", axis=0, rht=64))
    check(spread(24, 64, 1, BF16, seed=4), QuantSpec("mxfp4", rht=16, mx_scale="even"))


@pytest.mark.parametrize("sr_mode", ["hw8", "exact"])
def test_rht_with_stochastic_rounding(sr_mode):
    """The Wgrad operand of the paper's recipe: 16-point RHT on the tokens, then SR; the SR
    counter is the element's index in x, as in the reference."""
    spec = QuantSpec("nvfp4", axis=0, rht=16, rounding="sr", sr_mode=sr_mode)
    check(spread(96, 40, 0, BF16, seed=6), spec, seed=11, stream=Stream(3, 7, 2, 1))


def test_non_finite_and_overflow_spread_over_their_chunk():
    """A NaN or Inf makes its whole chunk (and so its blocks) non-finite; 3e38 + 3e38
    overflows to inf inside the butterfly."""
    x = spread(64, 16, 0, F32, seed=7)
    x[0, 2], x[17, 3], x[5, 4], x[6, 4] = NAN, float("inf"), 3e38, 3e38
    spec = QuantSpec("nvfp4", axis=0, rht=RHTSpec(16, "none"))
    local, _ = fake_quantize_parts(x, spec)
    assert torch.isnan(local[:16, 2]).all() and torch.isnan(local[:16, 4]).all()
    check(x, spec)
    check(x.t().contiguous().to(BF16), QuantSpec("mxfp4", rht=32))


def test_bf16_ties_after_the_transform_round_to_even():
    """Rotated values exactly halfway between two bf16 values: (1 + 2^-8) / 4 rounds down to
    1/4, (1 + 3 * 2^-8) / 4 up to (1 + 2^-6) / 4. They are the tensor's largest, so the amax,
    the global scale and the block scales all see the rounding."""
    x = torch.zeros(16, 8)
    x[:2, 0] = torch.tensor([1.0, 2.0 ** -8])
    x[:2, 1] = torch.tensor([1.0 + 2.0 ** -7, 2.0 ** -8])
    x[:, 2:] = torch.randn(16, 6, generator=gen(12)) * 0.01
    x = x.to(device=DEVICE, dtype=BF16)
    spec = QuantSpec("nvfp4", axis=0, rht=RHTSpec(16, "none"))
    check(x, spec)
    check(x[:, :1].contiguous(), spec)  # each tie alone holds the amax
    check(x[:, 1:2].contiguous(), spec)


def test_middle_axis_noncontiguous_and_explicit_signs():
    check(spread(32, 48, 0, F32, seed=8).view(2, 16, 48).transpose(1, 2).contiguous()
          .transpose(1, 2), QuantSpec("nvfp4", axis=1, rht=16))
    x = spread(40, 64, 1, F32, seed=9).t()  # [64, 40], not contiguous
    assert not x.is_contiguous()
    check(x, QuantSpec("nvfp4", axis=0, rht=32), signs=torch.tensor([1.0, -1.0] * 16))


def test_dispatcher_uses_the_fused_kernel_for_rht_specs():
    """No reference call for an RHT spec: its result comes from the kernels."""
    x = spread(64, 24, 0, BF16, seed=10)
    spec = QuantSpec("nvfp4", axis=0, rht=16, rounding="sr")
    assert nvfp4_kernels.supported(spec)
    with mock.patch.object(nvfp4_kernels, "fake_quantize_parts", side_effect=AssertionError):
        got = nvfp4_kernels.operand(x, spec, seed=2)
    assert_bits_equal(got[0], fake_quantize_parts(x, spec, seed=2)[0])


def test_bad_rht_calls():
    x = torch.randn(48, 32, device=DEVICE)
    spec = QuantSpec("nvfp4", axis=0, rht=32)
    with pytest.raises(ValueError, match="needs its 32 signs"):
        fp4.fp4_quantize(x, spec, None, torch.ones(16))
    with pytest.raises(ValueError, match="multiple of 32"):  # the reference's own error
        fp4.fp4_quantize(x, spec, None, torch.ones(32))


@pytest.mark.parametrize("d", [2, 16, 64, 128, 256])
@pytest.mark.parametrize("block", [(16, 1), (1, 16), (32, 1), (1, 32)])
def test_every_tile_candidate_holds_whole_chunks(monkeypatch, block, d):
    """The autotune candidates (the GPU list, not the interpreter's one tile): extents along
    the transform axis are multiples of d, and a tall RHT tile stays within 16K elements."""
    monkeypatch.setattr(fp4, "_INTERPRET", False)
    BR, BC = block
    rht_r, rht_c = (d, 1) if BR > 1 else (1, d)
    for codes in (False, True):
        for g, nt, _ in fp4._tiles(BR, BC, codes, rht_r, rht_c):
            assert (g * BR) % rht_r == 0 and (nt * BC) % rht_c == 0, (g, nt)
            assert g * BR * nt * BC <= max(8192, 16 * d), (g, nt)


@needs_cuda
@pytest.mark.parametrize("d", [16, 128])
@pytest.mark.parametrize("dtype", [F32, BF16])
def test_realistic_wgrad_cuda(d, dtype):
    check(realistic_wgrad(dtype), QuantSpec("nvfp4", axis=0, rht=d, rounding="sr"), seed=9,
          stream=WGRAD_STREAM)
