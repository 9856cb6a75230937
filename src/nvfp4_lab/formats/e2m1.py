"""E2M1, the FP4 element of NVFP4 and MXFP4: rounding, codes, packing.

E2M1 has one sign, two exponent and one mantissa bit; its magnitudes are
{0, 0.5, 1, 1.5, 2, 3, 4, 6} (paper Sec. 2, App. B), so the spacing ("step") is 0.5 below 2,
1 in [2, 4) and 2 in [4, 6]. Both block formats first scale a block so that its amax lands
near 6, clip to [-6, 6], then round each element to this grid:

* **Round-to-nearest-even** follows Transformer Engine's reference threshold table
  (docs/numerics.md, E2M1): |y| <= 0.25 -> 0, < 0.75 -> 0.5, <= 1.25 -> 1, < 1.75 -> 1.5,
  <= 2.5 -> 2, < 3.5 -> 3, <= 5 -> 4, else 6. Ties go to the even code (0, 1, 2, 4).
* **Stochastic rounding** (paper Sec. 4.4, gradients only) rounds up with probability equal to
  the fractional position f between the two neighbouring grid points. Two flavours:
  - ``hw8``: the semantics of Blackwell's ``cvt.rs.satfinite.e2m1x4.f32``: an 8-bit random
    r is added to the top 8 discarded significand bits, then truncated, i.e. up iff
    floor(256 f) + r >= 256. P(up) = floor(256 f)/256, so hw8 is biased toward zero by less
    than step/256.
  - ``exact``: up iff r24 < f * 2^24 for a 24-bit r. P(up) = ceil(f * 2^24)/2^24: unbiased to
    FP32 precision.

Signs: TE's reference takes the sign from ``y < 0``, so -0.0 becomes code 0x0 (+0) while
values in [-0.25, 0) become 0x8 (-0). torchao keeps the sign bit of -0.0 (0x8). Both are
offered (``keep_negative_zero``); dequantized values are equal either way.

NaN: every comparison with NaN is false, so a threshold table would silently pick a grid
point. Here NaN magnitudes stay NaN through rounding, and the codes of NaN elements are 0;
the callers mark the whole block non-finite through its scale (see ``nvfp4.py``).

Codes are uint8 with the sign in bit 3; two codes are packed per byte, element 2j in the low
nibble and 2j+1 in the high nibble (TE, torchao, and cuBLAS agree on this).
"""
from __future__ import annotations

import torch

FP4_MAX = 6.0
GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


# The rounding below is arithmetic on fp32 tensors, without torch.where or comparisons: on
# the CPU those produce or read bool tensors through unvectorised kernels, ~20x the cost of a
# multiply over the same elements (benchmarks/RESULTS.md, Eager quantizers), and they were
# most of an eager NVFP4 quantizer's time. Every value formed is a small dyadic number, so
# each expression is exact and gives the same bits as the comparison it replaces.


def _step(a: torch.Tensor) -> torch.Tensor:
    """Grid spacing at magnitude a in [0, 6]: 0.5 below 2, 1 in [2, 4), 2 from 4 on; NaN
    stays NaN. With k = min(floor(a / 2), 2) in {0, 1, 2}, (k^2 + k + 2) / 4 = 0.5, 1, 2."""
    k = torch.clamp_max(torch.floor(a * 0.5), 2.0)
    return (k * (k + 1.0) + 2.0) * 0.25


def round_rne(a: torch.Tensor) -> torch.Tensor:
    """Round magnitudes a in [0, 6] (fp32) to the E2M1 grid, ties to even; NaN stays NaN.

    Within a binade the grid is uniform, so q = rne(a / step) * step with the step of a's
    binade. This is the threshold table above: a tie below a binade boundary (1.75, 3.5)
    rounds up to the even multiple 2 or 4, and 5 = 2.5 * 2 rounds to 2 * 2 = 4. Dividing by
    a power of two is exact, and torch.round is round-half-even.
    """
    s = _step(a)
    return torch.round(a * (1.0 / s)) * s


def _split(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """a -> (lo, step, f): the grid point at or below a, the spacing, and a's fractional
    position (a - lo) / step in [0, 1). Exact: lo <= a <= 2 lo (Sterbenz), step a power of 2.
    """
    s = _step(a)
    lo = torch.floor(a / s) * s
    return lo, s, (a - lo) / s


def round_sr_hw8(a: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """Stochastic rounding of magnitudes a in [0, 6] with 8 random bits (``cvt.rs`` semantics).

    The hardware adds an 8-bit random number to the top 8 discarded bits of the significand
    and truncates: up iff floor(256 f) + r8 >= 256. TE's software fallback writes this as
    t = a + (r8/256) * step in fp32, which can round t up to the next grid point when a is
    within an ulp below it; the integer form here has no such exception.
    a: fp32 [...]; bits: int32 [...] holding uint32 bits (``rng.random_bits``), of which the
    top byte is used.
    """
    lo, s, f = _split(a)
    r8 = ((bits >> 24) & 0xFF).to(torch.float32)
    up = torch.clamp(torch.floor(f * 256.0) + r8 - 255.0, 0.0, 1.0)  # integers: 1 iff >= 256
    return lo + s * up


def round_sr_exact(a: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """Stochastic rounding of magnitudes a in [0, 6], unbiased to 2^-24 of a step.

    a: fp32 [...]; bits: int32 [...] holding uint32 bits (``rng.random_bits``), of which the
    top 24 are used. Up iff r24 < f * 2^24, so P(up) = ceil(f * 2^24) / 2^24.
    """
    lo, s, f = _split(a)
    r24 = ((bits >> 8) & 0xFFFFFF).to(torch.float32)  # integers < 2^24: exact in fp32
    # r24 < f 2^24 iff r24 < ceil(f 2^24) (r24 an integer); f 2^24 is exact, its ceil <= 2^24
    up = torch.clamp(torch.ceil(f * 16777216.0) - r24, 0.0, 1.0)
    return lo + s * up


def apply_sign(mag: torch.Tensor, y: torch.Tensor, keep_negative_zero: bool) -> torch.Tensor:
    """Give the rounded magnitudes the sign of y (see the module docstring for -0.0)."""
    if keep_negative_zero:
        return torch.copysign(mag, y)
    # y < 0 takes the sign: -0.0 + 0.0 = +0.0 drops the sign of y = -0.0, and a NaN y (of
    # either sign: x86 makes negative NaNs) counts as not negative, as the comparison does
    return torch.copysign(mag, torch.nan_to_num(y, nan=0.0) + 0.0)


def to_codes(q: torch.Tensor) -> torch.Tensor:
    """E2M1 values (fp32, on the grid, signed) -> uint8 codes 0..15; NaN -> 0."""
    m = q.abs()
    # 0, .5, 1, 1.5 -> 2m; 2, 3 -> m + 2; 4, 6 -> m/2 + 4
    idx = torch.where(m < 2.0, m * 2.0, torch.where(m < 4.0, m + 2.0, m * 0.5 + 4.0))
    idx = torch.nan_to_num(idx, nan=0.0).to(torch.uint8)
    return idx | (torch.signbit(q) & ~torch.isnan(q)).to(torch.uint8) << 3


_DECODE = torch.tensor(GRID + tuple(-g for g in GRID), dtype=torch.float32)


def from_codes(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes 0..15 -> fp32 E2M1 values (code 8 is -0.0)."""
    return _DECODE.to(codes.device)[codes.long()]


def pack(codes: torch.Tensor) -> torch.Tensor:
    """codes: uint8 [..., 2n] -> uint8 [..., n], element 2j in the low nibble."""
    c = codes.reshape(*codes.shape[:-1], -1, 2)  # [..., n, 2]
    return c[..., 0] | (c[..., 1] << 4)


def unpack(packed: torch.Tensor) -> torch.Tensor:
    """packed: uint8 [..., n] -> codes uint8 [..., 2n]."""
    c = torch.stack((packed & 0xF, packed >> 4), dim=-1)  # [..., n, 2]
    return c.reshape(*packed.shape[:-1], -1)
