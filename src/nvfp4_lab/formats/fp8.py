"""FP8 (E4M3, E5M2) with current scaling: per tensor, or per block as in the paper's baseline.

The paper's FP8 reference (App. A.1, following DeepSeek-V3) quantizes every linear layer's
operands to E4M3 with scales computed online from the current amax and stored in FP32:
1x128 blocks for activations and gradients, 128x128 tiles for weights. This is TE's
``Float8BlockScaling`` with FP32 scales; TE's per-tensor ``Float8CurrentScaling`` is the same
rule with the whole tensor as one block. The scale rule is TE's ``scale_from_amax_tensor``
(docs/numerics.md, FP8), per block:

    scale     = fp8_max / a_b          (FLT_MAX if that overflows; 1 if a_b == 0)
    scale     = 2^floor(log2 scale)    only with pow2_scales (TE's default for block scaling)
    scale_inv = 1 / scale              the stored FP32 decode scale
    q         = fp8(clamp(x * scale, -fp8_max, fp8_max))    RNE, saturating

Decoding is fp32(q) * scale_inv. Elements are stored in torch's ``float8_e4m3fn`` /
``float8_e5m2`` dtypes; their cast is round-to-nearest-even. A block holding NaN or Inf gets
a NaN decode scale: the saturating clamp would otherwise turn an Inf into a finite fp8_max.
"""
from __future__ import annotations

import torch

from .scales import E4M3_MAX, E5M2_MAX, FLT_MAX, rdiv

DTYPES = {"fp8_e4m3": (torch.float8_e4m3fn, E4M3_MAX), "fp8_e5m2": (torch.float8_e5m2, E5M2_MAX)}


def encode_scales(block_amax: torch.Tensor, fmt: str, pow2_scales: bool = False) -> torch.Tensor:
    """Block amaxes (fp32) -> fp32 encode scales (NaN for non-finite blocks)."""
    fp8_max = DTYPES[fmt][1]
    scale = torch.clamp_max(rdiv(fp8_max, block_amax), FLT_MAX)
    if pow2_scales:
        # largest power of two <= scale: clear the mantissa (scale is a positive normal)
        scale = (scale.view(torch.int32) & 0x7F800000).view(torch.float32)
    scale = torch.where(block_amax == 0, 1.0, scale)
    return torch.where(torch.isfinite(block_amax), scale, float("nan"))


def quantize_blocks(xb: torch.Tensor, dims: tuple[int, ...], fmt: str, pow2_scales: bool = False):
    """xb: fp32 blocked view, a block spanning ``dims`` -> (q: fp8 shaped like xb,
    scale_inv: fp32 with size-1 ``dims``)."""
    dtype, fp8_max = DTYPES[fmt]
    scale = encode_scales(xb.abs().amax(dim=dims, keepdim=True), fmt, pow2_scales)
    y = torch.clamp(xb * scale, -fp8_max, fp8_max)
    return y.to(dtype), 1.0 / scale


def dequantize_blocks(q: torch.Tensor, scale_inv: torch.Tensor) -> torch.Tensor:
    """q: fp8 (blocked view); scale_inv: fp32, broadcasting onto q -> fp32 values."""
    return q.float() * scale_inv
