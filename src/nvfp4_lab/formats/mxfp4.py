"""MXFP4: E2M1 elements, 32-element blocks, one power-of-two (E8M0) scale per block.

The OCP microscaling format has no tensor-level scale: each block stores a bare exponent k and
its elements as E2M1 values of x / 2^k (paper Sec. 2, App. B.4). How k follows from the block
amax a is what distinguishes the variants (``scales.e8m0_exponent``):

* ``ceil`` (default): k = ceil(log2(a / 6)), the paper's "round the decode scale up", TE's
  reference MXFP4 (docs/numerics.md, MXFP4) and torchao's ``RCEIL``. The block amax never
  saturates, but a block whose amax is just above 3 * 2^k uses only {0 .. 3}: the worked
  example of App. B.4 (amax = 3 + delta quantizes to 3, one binade and four grid points lost).
* ``floor``: the OCP spec and microxcaling (``round="even"``): k = floor(log2 a) - 2, so
  a / 2^k lies in [4, 8) and amaxes above 6 * 2^k saturate to 6.
* ``even``: floor after rounding a to one mantissa bit (torchao ``EVEN``).

Encoding multiplies by 2^-k and decoding by 2^k; both are exact powers of two, so
x * 2^-k == x / 2^k bit for bit, including the subnormal 2^-127. A block holding NaN or Inf
gets the E8M0 NaN byte 0xFF and decodes to NaN. An input -0.0 keeps its sign bit (code 0x8),
as in torchao and the hardware conversions, so that MXFP4 ``ceil`` equals torchao's
``to_mx(..., RCEIL)`` byte for byte.
"""
from __future__ import annotations

import torch

from . import e2m1
from .scales import e8m0_exponent, e8m0_from_exponent, exp2_int


def quantize_blocks(xb: torch.Tensor, dims: tuple[int, ...], round_mag, mode: str = "ceil"):
    """Quantize a blocked view.

    xb: fp32 blocked view (blocks.py), a block spanning ``dims``; round_mag: E2M1 magnitude
    rounding (e2m1.py). Returns (q: fp32 signed E2M1 values shaped like xb, scales: e8m0
    with size-1 ``dims``).
    """
    k = e8m0_exponent(xb.abs().amax(dim=dims, keepdim=True), mode)  # 128 = NaN
    enc = exp2_int(torch.where(k == 128, 128, -k))
    y = torch.clamp(xb * enc, -e2m1.FP4_MAX, e2m1.FP4_MAX)
    q = e2m1.apply_sign(round_mag(y.abs()), y, keep_negative_zero=True)
    return q, e8m0_from_exponent(k)


def dequantize_blocks(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """q: fp32 E2M1 values (blocked view); scales: e8m0, broadcasting onto q -> fp32."""
    k = scales.view(torch.uint8).to(torch.int32) - 127
    return q * exp2_int(k)
