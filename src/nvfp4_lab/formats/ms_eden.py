"""MS-EDEN: unbiased NVFP4 rounding for the backward pass (Quartet II).

Stochastic rounding makes a quantized gradient unbiased at the price of a large variance: each
element lands on one of its two grid neighbours. Panferov et al., "Quartet II: Accurate LLM
Pre-Training in NVFP4 by Improved Unbiased Gradient Estimation" (arXiv 2601.22813; read here
from its repository, IST-DASLab/Quartet-II: ``quantizers/eden.py`` and the kernel
``eden_1x16s_fp4_kernel`` of ``schemes/quartet_2.py``), keep round-to-nearest for the elements
and move the randomness to where it costs less:

* the operand is rotated first by a random Hadamard transform of a large group (128 points
  in its ``quartet_v2`` scheme), on both operands of Dgrad and Wgrad, with fresh random
  signs at every backward call;
* after round-to-nearest, each Hadamard group g gets the EDEN correction
  c_g = sum_g y^2 / sum_g y q (y the scaled values, q their E2M1 rounding): rescaling the
  group's reconstruction by c_g makes it unbiased in expectation over the random rotation
  (EDEN, Vargaftik et al., 2022), where plain round-to-nearest shrinks it;
* c_g multiplies the group's E4M3 block scales, and since the product must again be an E4M3
  value, it is rounded *stochastically* to one of its two E4M3 neighbours ("MS": micro-scaled),
  which keeps the expectation. Scale headroom: the global scale maps the tensor amax to 256,
  not 448, so that a correction above 1 still fits (Quartet II's kernel: 255.99).

The arithmetic here is this lab's, exact and reproducible; Quartet II's own (a Triton fake
quantizer, ``quartet_2.py``) is not bit-exact with any hardware path, and we differ on purpose:

    ours                                          Quartet II's kernel
    TE's two-level scales (nvfp4.py), L = 256     amax / 255.99 / (6 / override), override
                                                  (17/16) * 0.93 on the backward pass
    E2M1 round-to-nearest, ties to even           ties away from zero; a zero scale -> 1
    sums of c_g in a fixed order (below)          tl.sum (order left to the compiler)
    scale SR from counter-based bits (rng.py)     tl.rand with a fresh seed per call
    operands quantized from the FP32/BF16         Dgrad's W and Wgrad's X re-quantized from
    tensors                                       the forward pass's FP4 values

The sums are element by element along each 16-element block, then block by block along the
group, so eager and compiled agree bit for bit. A group whose sum y q is 0 (all zero) keeps c =
1; a block whose E4M3 scale underflowed to 0 (TE's arithmetic has no floor) stays out of its
group's sums and decodes to 0. Shapes: the blocked view of ``blocks.py``, 1D blocks along axis
a, [..., L/16, 16, ...].
"""
from __future__ import annotations

import torch

from . import e2m1
from .blocks import ordered_sum
from .nvfp4 import block_scales, tensor_amax
from .scales import E4M3_MAX, to_e4m3

_TWO_M24 = 2.0 ** -24


def eden_correction(y: torch.Tensor, q: torch.Tensor, blocks_dim: int,
                    group_blocks: int) -> torch.Tensor:
    """c_g = sum y^2 / sum y q per group of ``group_blocks`` blocks, shaped [..., L/16, 1, ...]
    (one value per block, repeated over the blocks of its group).

    y, q: fp32 blocked view, blocks along ``blocks_dim`` and elements along ``blocks_dim + 1``.
    """
    def per_group(t):
        per_block = ordered_sum(t, blocks_dim + 1)              # [..., L/16, 1, ...]
        grouped = per_block.unflatten(blocks_dim, (-1, group_blocks))  # [..., L/G, G/16, 1]
        return ordered_sum(grouped, blocks_dim + 1)             # [..., L/G, 1, 1, ...]
    num, den = per_group(y * y), per_group(y * q)
    c = torch.where(den == 0, 1.0, num / den)                    # [..., L/G, 1, 1, ...]
    shape = list(c.shape)
    shape[blocks_dim + 1] = group_blocks
    return c.expand(shape).flatten(blocks_dim, blocks_dim + 1)   # [..., L/16, 1, ...]


def round_scale_sr(s: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """Non-negative fp32 scales -> float8_e4m3fn, rounded stochastically to the E4M3 value just
    below or just above, up with probability (s - down) / (up - down); NaN stays NaN.

    bits: int32 random bits (``rng.random_bits``), one per scale; the top 24 are used.
    """
    s = torch.clamp_max(s, E4M3_MAX)
    near = to_e4m3(s)                                   # RNE: one of the two neighbours
    code = near.view(torch.uint8)
    above = near.float() > s
    other = torch.where(above, code - 1, torch.clamp_max(code + 1, 0x7E))  # 0x7E = 448
    other = other.view(torch.float8_e4m3fn).float()
    down = torch.where(above, other, near.float())
    up = torch.where(above, near.float(), other)
    p_up = torch.where(up > down, (s - down) / (up - down), 0.0)
    u = ((bits >> 8) & 0xFFFFFF).to(torch.float32) * _TWO_M24   # uniform in [0, 1), exact
    return torch.where(u < p_up, up, down).to(torch.float8_e4m3fn)


def quantize_blocks(xb: torch.Tensor, dims: tuple[int, ...], group_blocks: int,
                    bits: torch.Tensor, limit: int = 256):
    """MS-EDEN on a blocked view of 1D blocks (already rotated by the group's RHT).

    xb: fp32 [..., L/16, 16, ...] with ``dims`` = (a + 1,); group_blocks: blocks per Hadamard
    group (RHT size / 16); bits: int32 random bits, one per block, shaped like the scales.
    Returns (q, s_b, amax) as ``nvfp4.quantize_blocks``, s_b the corrected E4M3 scales.
    """
    block_amax = xb.abs().amax(dim=dims, keepdim=True)
    amax = tensor_amax(block_amax)
    s_b, enc = block_scales(block_amax, amax, "te", limit)
    # not clipped, so that the correction also makes up for clipping; a block whose scale
    # underflowed to 0 decodes to 0 whatever its codes, and its x * FLT_MAX (possibly inf)
    # must not enter the group's sums
    y = torch.where(s_b.float() > 0, xb * enc, 0.0)
    clipped = torch.clamp(y, -e2m1.FP4_MAX, e2m1.FP4_MAX)
    q = e2m1.apply_sign(e2m1.round_rne(clipped.abs()), clipped, keep_negative_zero=False)
    c = eden_correction(y, q, dims[0] - 1, group_blocks)
    return q, round_scale_sr(s_b.float() * c, bits), amax
