"""4/6 ("four over six"): NVFP4 with a per-block choice between two block scales.

E2M1's grid is coarse at the top: between 4 and 6 there is nothing, so an element at 5/6 of its
block's amax loses up to a sixth of its value. Cook et al., "Four Over Six: More Accurate NVFP4
Quantization with Adaptive Block Scaling" (arXiv 2512.02010; the method as its abstract states
it), quantize every block twice, once with its amax mapped to 6 (the standard scale) and once
mapped to 4 (the scale times 1.5, so the top of the block lands on the finer 0..4 part of the
grid), and keep the candidate with the smaller error. Transformer Engine added it to NVFP4 in
2026 (``nvfp4_4over6``); this module reproduces TE's reference quantizer
(``reference_nvfp4.py``, ``_quantize_blockwise_4over6_reference``, default non-fast-math path)
bit for bit:

    S_enc  = min(6 * L / A, FLT_MAX)                 L: the global E4M3 limit, 256 by default
    S_dec  = 1 / S_enc
    base   = fp32(a_b / 6) * S_enc                   TE 2.8's ordering, not the 2.14 one
    s6     = e4m3(base),  s4 = e4m3(fp32(base * 1.5))    each clamped to 448, RNE
    enc    = min(1 / (fp32(s) * S_dec), FLT_MAX)     per candidate
    q      = E2M1_rne(clamp(x * enc, -6, 6))         per candidate
    err    = sum_i |((q_i * s) * A) / (6 * L) - x_i|  (MAE; MSE squares the difference)
    pick map-to-4 iff err4 < err6                    a tie keeps the standard scale

Why L = 256: with L = 448 a block at the tensor amax has base = 448, and base * 1.5 would
saturate at 448, so the map-to-4 candidate could not exist there. Lowering the global limit to
256 leaves room (256 * 1.5 = 384 <= 448), at the price of a slightly coarser global scale.
The decode and the GEMM's alpha use the same L (``nvfp4.dequantize_blocks``, ``gemm_alpha``).

The error is summed in a fixed order, since a different order changes ties and with them the
chosen scale: element by element along the block (1x16); for a 16x16 tile each row's error
along its 16 columns, then the 16 row errors pairwise, [0:8] + [8:16], [0:4] + [4:8], and so
on (TE's warp reduction). Consequence: TE's columnwise copy of a 2D weight (quantized from
W^T) sums its tile in the other order and may choose differently on an exact tie; here a 2D
weight is chosen once and reused transposed, which keeps Q(W^T) = Q(W)^T.

What TE forbids, so do we (``QuantSpec``): 4/6 with stochastic rounding or an RHT, and 4/6 on
MXFP4. Non-finite blocks get the NaN scale, as in the standard path (nvfp4.py).
"""
from __future__ import annotations

import torch

from . import e2m1
from .blocks import ordered_sum
from .nvfp4 import tensor_amax
from .scales import E4M3_MAX, FLT_MAX, rdiv, to_e4m3


def candidate(xb: torch.Tensor, s_b: torch.Tensor, s_dec: torch.Tensor):
    """One candidate scale applied: (q: fp32 signed E2M1 values shaped like xb, enc_b)."""
    enc = torch.clamp_max(1.0 / (s_b.float() * s_dec), FLT_MAX)
    y = torch.clamp(xb * enc, -e2m1.FP4_MAX, e2m1.FP4_MAX)
    return e2m1.apply_sign(e2m1.round_rne(y.abs()), y, keep_negative_zero=False)


def block_error(xb: torch.Tensor, q: torch.Tensor, s_b: torch.Tensor, amax: torch.Tensor,
                limit: int, error: str, dims: tuple[int, ...]) -> torch.Tensor:
    """Per-block error of a candidate, in the order TE sums it. Shaped like s_b (keepdim).

    xb, q: fp32 blocked view; dims: (d,) for 1D blocks along d, (rows, cols) for 2D tiles.
    """
    decoded = ((q * s_b.float()) * amax) / torch.full_like(amax, 6.0 * limit)
    diff = decoded - xb
    e = diff.abs() if error == "mae" else diff * diff
    acc = ordered_sum(e, dims[-1])                 # element by element, as TE's loop adds
    if len(dims) == 2:                             # 2D tile: the row errors, pairwise
        rows = dims[0]
        while acc.shape[rows] > 1:
            h = acc.shape[rows] // 2
            acc = acc.narrow(rows, 0, h) + acc.narrow(rows, h, h)
    return acc


def quantize_blocks(xb: torch.Tensor, dims: tuple[int, ...], error: str = "mae",
                    limit: int = 256, rows: bool = False):
    """Quantize a blocked view (blocks.py) with 4/6 scale selection.

    xb: fp32, each block spanning ``dims`` (1x16 blocks or 16x16 tiles); rows: one amax per
    row (row-scaled NVFP4, 1x16 blocks along the last dim), which then also enters the error.
    Returns (q: fp32 signed E2M1 values shaped like xb, s_b: e4m3 scales with size-1 ``dims``,
    amax: fp32 0-d or per row), as ``nvfp4.quantize_blocks``.
    """
    block_amax = xb.abs().amax(dim=dims, keepdim=True)
    amax = tensor_amax(block_amax, rows)
    s_enc = torch.clamp_max(rdiv(6.0 * limit, amax), FLT_MAX)
    s_dec = 1.0 / s_enc
    base = (block_amax / e2m1.FP4_MAX) * s_enc
    finite = torch.isfinite(block_amax)
    s6 = to_e4m3(torch.where(finite, torch.clamp_max(base, E4M3_MAX), float("nan")))
    s4 = to_e4m3(torch.where(finite, torch.clamp_max(base * 1.5, E4M3_MAX), float("nan")))
    q6, q4 = candidate(xb, s6, s_dec), candidate(xb, s4, s_dec)
    pick4 = (block_error(xb, q4, s4, amax, limit, error, dims)
             < block_error(xb, q6, s6, amax, limit, error, dims))
    s_b = torch.where(pick4, s4.float(), s6.float()).to(torch.float8_e4m3fn)  # exact: E4M3
    return torch.where(pick4, q4, q6), s_b, amax
