"""The GEMM epilogue kernel (``nvfp4_kernels.epilogue``) against torch's ops, bit for bit.

The oracle is written here from TE's ``qgemm`` (alpha = fp32(A_a * A_b) / (6 L_a * 6 L_b),
divided by a tensor: correctly rounded; ``tests/helpers/te_reference.py``) and torch's casts:
Y * alpha, rounded to the compute dtype, stored in the caller's dtype. Inputs hold BF16 ties
both ways, fp32 subnormals, values that round to BF16's Inf, signed zeros, Inf and NaN, and
amaxes whose product is zero, subnormal or overflows.
"""
from __future__ import annotations

import pytest
import torch
from helpers.kernel_cases import DEVICE, F32, assert_bits_equal, gen, interpreter_warnings

from nvfp4_kernels import epilogue

pytestmark = interpreter_warnings
BF16 = torch.bfloat16


def outputs(rows: int = 40, cols: int = 300) -> torch.Tensor:
    """An FP32 GEMM output: normal values over many binades and the special cases."""
    g = gen(7)
    y = torch.randn(rows, cols, generator=g) * torch.exp(6 * torch.randn(rows, 1, generator=g))
    y[0, :10] = torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 2.0 ** -130,
                              -(2.0 ** -140), 3.3e38, -0.0, float("inf"), float("nan"), 0.0])
    return y.to(DEVICE)


def oracle(y, amaxes, limits, round_to, dtype):
    if amaxes:
        product = amaxes[0] * amaxes[1] if len(amaxes) == 2 else amaxes[0]
        ranges = torch.tensor(float(torch.tensor([6.0 * v for v in limits]).prod()), dtype=F32)
        y = y * (product / ranges.to(y.device))
    return y.to(round_to).to(dtype)


AMAXES = [(), (2.0e3,), (2.0e3, 0.75), (0.0, 5.0), (1e-30, 1e-15), (3e38, 2.0)]
DTYPES = [(BF16, BF16), (BF16, F32), (F32, BF16), (F32, F32)]


@pytest.mark.parametrize("amax_values", AMAXES)
@pytest.mark.parametrize(("round_to", "dtype"), DTYPES)
def test_epilogue_equals_the_ops(amax_values, round_to, dtype):
    y = outputs()
    amaxes = tuple(torch.tensor(v, dtype=F32, device=DEVICE) for v in amax_values)
    limits = (448, 256)[:len(amaxes)]
    divisor = float(torch.tensor([6.0 * v for v in limits]).prod()) if limits else 1.0
    got = epilogue.gemm_epilogue(y, amaxes, divisor, round_to, dtype)
    want = oracle(y, amaxes, limits, round_to, dtype)
    assert got.dtype == dtype and got.shape == y.shape
    assert_bits_equal(got.float(), want.float(), "epilogue")


def test_ties_round_to_even():
    """1 + 2^-8 is halfway between 1 and 1 + 2^-7 (down to even), 1 + 3 * 2^-8 halfway between
    1 + 2^-7 and 1 + 2^-6 (up to even): a rounding by truncation or away from zero fails."""
    y = torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8], device=DEVICE)
    got = epilogue.gemm_epilogue(y, (), 1.0, BF16, F32)
    assert got.tolist() == [1.0, 1 + 2 ** -6]


def test_refuses_what_it_does_not_compute():
    y = outputs(4, 16)
    rows = torch.ones(4, 1, device=DEVICE)  # a row-scaled amax
    assert not epilogue.supports(y, (rows,), BF16, BF16)
    assert not epilogue.supports(y, (), torch.float16, torch.float16)
    with pytest.raises(ValueError, match="no epilogue kernel"):
        epilogue.gemm_epilogue(y, (rows,), 2688.0, BF16, BF16)
