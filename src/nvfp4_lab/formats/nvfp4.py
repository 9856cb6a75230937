"""NVFP4: E2M1 elements, 16-element blocks, E4M3 block scales, one FP32 tensor amax.

NVFP4 is a two-level microscaling format (paper Sec. 2, App. B, Eq. 1-5). The FP32 tensor
scale moves the whole tensor into the range that FP4 x E4M3 can represent; each block's E4M3
scale then moves the block into the FP4 range, so the block amax lands on 6 at near-FP8
precision. This module reproduces Transformer Engine's reference quantizer bit for bit
(codes, E4M3 scale bytes and amax; docs/numerics.md, NVFP4). All arithmetic is FP32 with
round-to-nearest-even:

    A      = max |x|                                   tensor amax (after the RHT, if any)
    S_enc  = min(2688 / A, FLT_MAX)                    2688 = 448 * 6   (Eq. 1)
    S_dec  = 1 / S_enc
    a_b    = max |x_i| over the block
    s_b    = e4m3(min(a_b * (S_enc * fp32(1/6)), FLT_MAX))   RNE, saturating at 448 (Eq. 2-3)
    enc_b  = min(1 / (fp32(s_b) * S_dec), FLT_MAX)      a zero scale gives FLT_MAX, not inf
    y_i    = clamp(x_i * enc_b, -6, 6)                 E4M3 rounding can push amax above 6
    code_i = E2M1(y_i)                                 RNE, or SR for gradients (e2m1.py)

There is no lower clamp on s_b: a block far below the tensor amax gets a subnormal or a zero
scale, and a zero scale gives enc_b = FLT_MAX (docs/numerics.md, NVFP4: Small blocks).

Decoding follows TE's dequantize kernel (``dequantize_nvfp4.cuh``; TE's reference quantizer
has no decode of its own): x_hat = e2m1 * ((fp32(s_b) * A) * fp32(1/2688)), each product
rounded to FP32. The ``torchao`` order decodes as torchao does, e2m1 * (fp32(A/2688) * s_b).
A GEMM never decodes: a block-scaled tensor core multiplies e2m1 * s_b (exact: 2 + 4
significant bits) with FP32 accumulation and scales its FP32 output once by
alpha = fp32(A_x * A_w) / 2688^2 (Eq. 5; TE's ``qgemm``), see ``gemm_alpha``.
(``docs/numerics.md`` says why the decode and the GEMM round differently.)

Orderings (``order``), since users compare against each:
* ``te`` (default): TE >= 2.14 and its CUDA kernels, as above.
* ``te_v2_8``: TE 2.8-2.13 reference, s_b = e4m3((a_b / 6) * S_enc). Differs from ``te`` on
  about 0.1 % of blocks.
* ``torchao``: torchao 0.18 ``nvfp4_quantize`` with a per-tensor scale: pts = A / 2688,
  s_b = e4m3(clamp((a_b / 6) / pts, 2^-6, 448)) (note the floor at the smallest E4M3 normal),
  enc_b = (1 / pts) / fp32(s_b), and -0.0 keeps its sign bit.

Non-finite input (TE leaves it undefined: an Inf would saturate to a finite 6): a block
holding a NaN or Inf gets the E4M3 NaN scale 0x7F and the tensor amax A is taken over the
other blocks, so its dequantized values are all NaN. ``QTensor.has_nonfinite`` reads this off
the scales (n/16 bytes) without another pass over the data.
"""
from __future__ import annotations

import math

import torch

from . import e2m1
from .scales import E4M3_MAX, FLT_MAX, rdiv, to_e4m3
from .spec import ORDERS

_INV6 = float(torch.tensor(1.0 / 6.0, dtype=torch.float32))  # fp32(1/6) = 0.16666667163...
_E4M3_MIN_NORMAL = 2.0 ** -6
_RANGE = E4M3_MAX * e2m1.FP4_MAX  # 2688


def tensor_amax(block_amax: torch.Tensor, rows: bool = False) -> torch.Tensor:
    """The tensor amax A from the block amaxes, skipping non-finite blocks. fp32 0-d; with
    ``rows``, one per row (row-scaled NVFP4: block_amax [..., L/b, 1] -> [..., 1, 1]).

    For finite input this is max |x|. Taking it from the n/16 block amaxes rather than from
    x saves a pass over the data (one that cannot vectorise behind an RHT).
    """
    finite = torch.where(torch.isfinite(block_amax), block_amax, 0.0)
    return finite.amax(dim=-2, keepdim=True) if rows else finite.amax()


def block_scales(block_amax: torch.Tensor, amax: torch.Tensor, order: str = "te",
                 limit: int = 448):
    """E4M3 block decode scales and the fp32 block encode scales.

    block_amax: fp32, one per block (NaN/Inf for non-finite blocks); amax: fp32 0-d;
    limit: the global E4M3 limit L (S_enc = 6 L / A; 448, or 256 for headroom, ms_eden.py).
    Returns (s_b: float8_e4m3fn, enc_b: fp32), shaped like block_amax.
    """
    if order == "torchao":
        pts = amax / _RANGE
        s = torch.clamp((block_amax / e2m1.FP4_MAX) / pts, _E4M3_MIN_NORMAL, E4M3_MAX)
        # A == 0: torchao divides 0/0; we keep TE's all-zero result instead of NaN scales
        s = torch.where(amax > 0, s, 0.0)
    else:
        # A is finite (tensor_amax), so S_enc > 0 and TE's "S_enc == 0 -> 1" never fires
        s_enc = torch.clamp_max(rdiv(value_range(limit), amax), FLT_MAX)
        if order == "te":
            s = block_amax * (s_enc * _INV6)
        elif order == "te_v2_8":
            s = (block_amax / e2m1.FP4_MAX) * s_enc
        else:
            raise ValueError(f"NVFP4 scale order must be one of {ORDERS}, got {order!r}")
        s = torch.clamp_max(s, FLT_MAX)
    s_b = to_e4m3(torch.where(torch.isfinite(block_amax), s, float("nan")))
    s32 = s_b.float()
    if order == "torchao":
        enc = (1.0 / torch.where(amax > 0, pts, 1.0)) / s32
    else:
        enc = torch.clamp_max(1.0 / (s32 * (1.0 / s_enc)), FLT_MAX)
    return s_b, enc


def quantize_blocks(xb: torch.Tensor, dims: tuple[int, ...], round_mag, order: str = "te",
                    rows: bool = False):
    """Quantize a blocked view.

    xb: fp32 blocked view (blocks.py), a block spanning ``dims``;
    round_mag: magnitudes in [0, 6] -> E2M1 magnitudes (RNE or SR, see e2m1.py);
    rows: one amax per row (1D blocks along the last dim, xb [..., L/b, b]).
    Returns (q: fp32 signed E2M1 values shaped like xb, s_b: e4m3 block scales with size-1
    ``dims``, amax: fp32 0-d, or [..., 1, 1] per row).
    """
    block_amax = xb.abs().amax(dim=dims, keepdim=True)
    amax = tensor_amax(block_amax, rows)
    s_b, enc = block_scales(block_amax, amax, order)
    y = torch.clamp(xb * enc, -e2m1.FP4_MAX, e2m1.FP4_MAX)
    q = e2m1.apply_sign(round_mag(y.abs()), y, keep_negative_zero=order == "torchao")
    return q, s_b, amax


def value_range(limit: int = 448) -> float:
    """The largest NVFP4 value the tensor scale maps A onto: 6 * L, with L the global E4M3
    limit (448; 256 under 4/6, four_over_six.py). 2688 by default."""
    return e2m1.FP4_MAX * limit


def global_decode_scale(amax: torch.Tensor, limit: int = 448) -> torch.Tensor:
    """fp32(A / (6 L)): the tensor-level factor torchao decodes with, and the GEMM's alpha
    when only one operand is NVFP4 (L = 448: A / 2688).

    Divided tensor by tensor: CUDA computes ``tensor / python_number`` as a multiplication by
    the scalar's reciprocal (a different result for ~1/5 of amaxes), the CPU divides; a
    tensor divisor is a correctly rounded division on both.
    """
    return amax / torch.full_like(amax, value_range(limit))


def gemm_alpha(amax_a: torch.Tensor, amax_b: torch.Tensor | None = None, limit_a: int = 448,
               limit_b: int = 448) -> torch.Tensor:
    """The factor a block-scaled GEMM applies to its FP32 output. fp32 0-d.

    Two NVFP4 operands: fp32(A_a * A_b) / (6 L_a * 6 L_b), correctly rounded (TE's reference
    ``qgemm``; 2688^2 = 7225344, 2688 * 1536 and 1536^2 are exact in fp32). One: A / (6 L).
    """
    if amax_b is None:
        return global_decode_scale(amax_a, limit_a)
    return (amax_a * amax_b) / torch.full_like(amax_a, alpha_divisor(limit_a, limit_b))


def alpha_divisor(*limits: int) -> float:
    """What a GEMM divides the product of its NVFP4 operands' amaxes by: the product of their
    value ranges 6 L (``gemm_alpha``; exact in fp32)."""
    return math.prod(value_range(limit) for limit in limits)


def dequantize_blocks(q: torch.Tensor, s_b: torch.Tensor, amax: torch.Tensor,
                      order: str = "te", limit: int = 448) -> torch.Tensor:
    """q: fp32 E2M1 values (blocked view); s_b: e4m3, broadcasting onto q -> fp32 values.

    te / te_v2_8: q * ((s_b * A) * fp32(1/(6 L))), TE's dequantize kernel (L = 448: 1/2688);
    torchao: q * (fp32(A / 2688) * s_b), torchao's ``NVFP4Tensor.dequantize``.
    """
    if order == "torchao":
        return q * (global_decode_scale(amax) * s_b.float())
    inv_range = float(torch.tensor(1.0 / value_range(limit), dtype=torch.float32))  # factor_inv
    return q * ((s_b.float() * amax) * inv_range)
