"""Scale encodings: E4M3 (NVFP4 block scales) and E8M0 (MX block scales).

E4M3 ("fn" variant): no infinities, max 448, min normal 2^-6, min subnormal 2^-9, NaN = 0x7F.
A scale is clamped to 448 first, then cast with round-to-nearest-even by torch's
``float8_e4m3fn`` conversion, which is the reference RNE (the Triton kernels round with bit
operations instead, see docs/triton.md).

E8M0: a bare biased exponent, 2^(e - 127) for e in 0..254, 0xFF = NaN. The exponent is derived
from the FP32 bit pattern, never from ``log2`` (torch.log2 is off by one for arguments a few
ulps above a power of two; docs/numerics.md, E4M3 and E8M0 scales). For an FP4 block with amax a:

* ``ceil`` (default; the paper's round-up, App. B.4; TE's reference; cuBLAS/torchao RCEIL):
  k = ceil(log2(fp32(a / 6))): the exponent of a/6 plus one unless its mantissa is zero.
* ``floor`` (OCP MX spec, microxcaling): k = floor(log2 a) - 2 (2 = emax of E2M1), so a/2^k
  lies in [4, 8) and values above 6 saturate.
* ``even``: like floor after rounding a's mantissa to one bit, half to even on the bit
  pattern (add 2^21, clear the mantissa): the exponent is bumped when a/2^e >= 1.75.

k is clamped to [-127, 127]; a zero block gets 2^-127, a non-finite block amax gets NaN.
"""
from __future__ import annotations

import torch

from .spec import E8M0_MODES

E4M3_MAX = 448.0
E5M2_MAX = 57344.0
FLT_MAX = 3.4028234663852886e38
_FP4_EMAX = 2


def rdiv(num: float, t: torch.Tensor) -> torch.Tensor:
    """num / t, correctly rounded. ``num / t`` with a Python number is ``t.reciprocal() * num``
    in torch (two roundings): it differs from the division for about a quarter of fp32 t."""
    return torch.full_like(t, num) / t


def to_e4m3(s: torch.Tensor) -> torch.Tensor:
    """Non-negative fp32 scales (NaN allowed) -> float8_e4m3fn, saturating at 448, RNE."""
    return torch.clamp_max(s, E4M3_MAX).to(torch.float8_e4m3fn)


def _exponent_field(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 a >= 0 -> (biased exponent field, mantissa field) as int32."""
    bits = a.view(torch.int32)
    return (bits >> 23) & 0xFF, bits & 0x7FFFFF


def e8m0_exponent(amax: torch.Tensor, mode: str = "ceil") -> torch.Tensor:
    """Block amax (fp32, >= 0 or NaN/inf) -> unbiased scale exponent k, int32, in [-127, 127].

    Non-finite amax gives 128 (the caller maps it to the NaN byte 0xFF).
    """
    if mode == "ceil":
        t = amax / 6.0
        e, m = _exponent_field(t)
        k = e - 127 + (m != 0).to(torch.int32)
        # fp32 subnormal t (e == 0): log2 t < -126, so k is -126 or at most -127 after the clamp
        k = torch.where(e == 0, torch.where(t > 2.0 ** -127, -126, -127), k)
    elif mode == "floor":
        e, _ = _exponent_field(amax)
        k = e - 127 - _FP4_EMAX  # subnormal amax (e == 0) lands below -127 and is clamped
    elif mode == "even":
        bits = amax.view(torch.int32)
        e = (((bits + (1 << 21)) >> 23) & 0xFF)
        k = e - 127 - _FP4_EMAX
    else:
        raise ValueError(f"E8M0 scale mode must be one of {E8M0_MODES}, got {mode!r}")
    k = torch.clamp(k, -127, 127)
    return torch.where(torch.isfinite(amax), k, 128).to(torch.int32)


def e8m0_from_exponent(k: torch.Tensor) -> torch.Tensor:
    """Unbiased exponent k (int32, 128 = NaN) -> float8_e8m0fnu bytes."""
    return (k + 127).to(torch.uint8).view(torch.float8_e8m0fnu)


def exp2_int(k: torch.Tensor) -> torch.Tensor:
    """2^k as fp32 for int32 k in [-127, 127] (exact, including the subnormal 2^-127); 128 -> NaN.

    Built from the bit pattern: 2^k = bits (k + 127) << 23 for k >= -126; 2^-127 = 0x00400000.
    """
    normal = ((k + 127) << 23).view(torch.float32)
    v = torch.where(k == -127, 2.0 ** -127, normal)
    return torch.where(k == 128, float("nan"), v)
