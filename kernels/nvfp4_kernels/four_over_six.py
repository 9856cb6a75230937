"""Triton device helpers for 4/6 block-scale selection (``formats/four_over_six.py``).

Per block, both candidates (the amax mapped to 6, and to 4 with the scale times 1.5) are
quantized from the same registers and their errors summed in the reference's order, which
decides ties and so the chosen scale:

* along a block's 16 elements one at a time, in index order: ``_ordered_sum`` adds the
  element picked by a mask at each step (a sum of one value and zeros is that value, exactly);
* for a 16x16 tile, the 16 row errors pairwise, rows [0:8] + [8:16], then [0:4] + [4:8], ...:
  ``_pairwise_rows`` reshapes the rows into two halves and sums each pair of two (a sum of two
  values does not depend on their order).

The MSE error's squares feed additions; the kernels run with ``enable_fp_fusion=False`` (fp4.py),
so no fused multiply-add skips their rounding. Conventions as in ``_bits.py``: a tile is
``[G, BR, NT, BC]``, block quantities ``[G, 1, NT, 1]``.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ._bits import FLT_MAX, e2m1_rne, e4m3_rne


@triton.jit
def _candidate(x, dec, s_dec):
    """One candidate scale applied (``four_over_six.candidate``): (y clipped, E2M1 magnitude)."""
    enc = tl.minimum(tl.div_rn(1.0, dec * s_dec), FLT_MAX)
    y = tl.minimum(tl.maximum(x * enc, -6.0), 6.0)
    return y, e2m1_rne(tl.abs(y))


@triton.jit
def _ordered_sum(e, AXIS: tl.constexpr, N: tl.constexpr):
    """Sum of e [G, BR, NT, BC] along AXIS (1 or 3, of size N), one element at a time in
    index order; keepdims."""
    if AXIS == 1:
        idx = tl.arange(0, N)[None, :, None, None]
    else:
        idx = tl.arange(0, N)[None, None, None, :]
    acc = tl.sum(tl.where(idx == 0, e, 0.0), axis=AXIS, keep_dims=True)
    for i in tl.static_range(1, N):
        acc = acc + tl.sum(tl.where(idx == i, e, 0.0), axis=AXIS, keep_dims=True)
    return acc


@triton.jit
def _pairwise_rows(r, G: tl.constexpr, BR: tl.constexpr, NT: tl.constexpr):
    """Row errors r [G, BR, NT, 1] -> [G, 1, NT, 1], halves added pairwise (TE's reduction)."""
    t = tl.reshape(r, (G, BR, NT))
    H: tl.constexpr = BR // 2
    t = tl.sum(tl.reshape(t, (G, 2, H, NT)), axis=1)
    if H > 1:
        t = tl.sum(tl.reshape(t, (G, 2, H // 2, NT)), axis=1)
    if H > 2:
        t = tl.sum(tl.reshape(t, (G, 2, H // 4, NT)), axis=1)
    if H > 4:
        t = tl.sum(tl.reshape(t, (G, 2, H // 8, NT)), axis=1)
    return tl.reshape(t, (G, 1, NT, 1))


@triton.jit
def _block_error(x, y, mag, dec, amax, LIMIT: tl.constexpr, MSE: tl.constexpr,
                 BR: tl.constexpr, BC: tl.constexpr, G: tl.constexpr, NT: tl.constexpr):
    """A candidate's error per block (``four_over_six.block_error``): decoded
    ((q * s) * A) / (6 L) minus x, absolute or squared, summed in the reference's order."""
    q = tl.where(y < 0.0, -mag, mag)
    decoded = tl.div_rn((q * dec) * amax, 6.0 * LIMIT)
    diff = decoded - x
    if MSE:
        e = diff * diff
    else:
        e = tl.abs(diff)
    if BR == 1:      # 1D blocks along C
        err = _ordered_sum(e, 3, BC)
    elif BC == 1:    # 1D blocks along R
        err = _ordered_sum(e, 1, BR)
    else:            # 2D tiles: each row along C, then the rows pairwise
        err = _pairwise_rows(_ordered_sum(e, 3, BC), G, BR, NT)
    return err


@triton.jit
def four_over_six_select(x, a_b, amax, LIMIT: tl.constexpr, MSE: tl.constexpr,
                         BR: tl.constexpr, BC: tl.constexpr, G: tl.constexpr,
                         NT: tl.constexpr):
    """The 4/6 choice for a tile (``four_over_six.quantize_blocks``).

    x: fp32 tile; a_b: fp32 block amaxes [G, 1, NT, 1]; amax: fp32 tensor amax A.
    Returns (dec: the chosen fp32 E4M3 scale, y: x scaled by it and clipped, mag: E2M1
    magnitudes of y). Non-finite blocks are the caller's to overwrite.
    """
    s_enc = tl.minimum(tl.div_rn(6.0 * LIMIT, amax), FLT_MAX)
    s_dec = tl.div_rn(1.0, s_enc)
    base = tl.div_rn(a_b, 6.0) * s_enc
    dec6 = e4m3_rne(tl.minimum(base, 448.0))
    dec4 = e4m3_rne(tl.minimum(base * 1.5, 448.0))
    y6, mag6 = _candidate(x, dec6, s_dec)
    y4, mag4 = _candidate(x, dec4, s_dec)
    err6 = _block_error(x, y6, mag6, dec6, amax, LIMIT, MSE, BR, BC, G, NT)
    err4 = _block_error(x, y4, mag4, dec4, amax, LIMIT, MSE, BR, BC, G, NT)
    pick4 = err4 < err6
    return (tl.where(pick4, dec4, dec6), tl.where(pick4, y4, y6),
            tl.where(pick4, mag4, mag6))
