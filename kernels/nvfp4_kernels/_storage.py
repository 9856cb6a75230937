"""The storage form on the device: where codes, FP8 bytes and scales go in a ``QTensor``.

``QTensor`` keeps elements and scales in the canonical layout of ``formats/blocks.py``: padded
to whole blocks, the blocked axis moved last (1D), so the two codes of a byte are neighbours
along a block. With the kernels' view of x as ``[P, R, C]`` (``fp4._view``, ``fp8._view``)
that layout is ``[P, R_pad, C_pad]`` row-major, or its transpose ``[P, C, R_pad]`` when the
blocks run along R (1D blocks along an axis that is not the last: the Wgrad operands):

    element (p, r, c)  ->  p R_pad C_pad + r C_pad + c      (trans: + c R_pad + r)
    block   (p, i, j)  ->  p n_i n_j     + i n_j   + j      (trans: + j n_i   + i)

with n_i x n_j blocks of BR x BC elements, R_pad = n_i BR and C_pad = n_j BC. The zero padding
of partial blocks is stored too, as the reference stores it (code 0, fp8 byte 0x00): a
program's tile is made of whole blocks, so every padded element belongs to some program.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from nvfp4_lab.formats.blocks import Layout

from ._bits import tile_coords


@triton.jit
def canonical_index(p, i, j, n_i, n_j, TRANS: tl.constexpr):
    """Row-major index of (p, i, j) in [P, n_i, n_j], or in [P, n_j, n_i] if TRANS."""
    if TRANS:  # one return: Triton compiles both returns of an early-return static branch
        index = (p * n_j + j) * n_i + i
    else:
        index = (p * n_i + i) * n_j + j
    return index


@triton.jit
def storage_offsets(R, C, BR: tl.constexpr, BC: tl.constexpr, G: tl.constexpr,
                    NT: tl.constexpr):
    """The storage places of an FP4 kernel's tile (``_bits.tile_coords``).

    Blocks taller than wide run along R, so their layout is the transposed one. Returns int64
    (elements [G, BR, NT, BC], scales [G, 1, NT, 1]), -1 where a block is outside the padded
    tensor (a marker that survives ``store_packed``'s reshapes, where a mask would need its own).
    """
    TRANS: tl.constexpr = BR > BC
    p, i, j, r, c = tile_coords(R, C, BR, BC, G, NT)
    n_i = tl.cdiv(R, BR)
    n_j = tl.cdiv(C, BC)
    inside = (i < n_i) & (j < n_j)
    elems = canonical_index(p, r, c, n_i * BR, n_j * BC, TRANS)
    scales = canonical_index(p, i, j, n_i, n_j, TRANS)
    return tl.where(inside, elems, -1), tl.where(inside, scales, -1)


@triton.jit
def _pairs(v, BR: tl.constexpr, BC: tl.constexpr, G: tl.constexpr, NT: tl.constexpr):
    """v [G, BR, NT, BC] -> (even, odd) elements of each pair of neighbours along the block
    axis: BR when blocks are taller than wide (then BC = 1), else BC."""
    if BR > BC:  # the pair is two rows: bring it to a trailing dim of 2
        w = tl.permute(tl.reshape(v, (G * BR // 2, 2, NT)), (0, 2, 1))
    else:
        w = tl.reshape(v, (G * BR * NT * BC // 2, 2))
    return tl.split(w)


@triton.jit
def store_packed(ptr, codes, elems, BR: tl.constexpr, BC: tl.constexpr, G: tl.constexpr,
                 NT: tl.constexpr):
    """Pack E2M1 codes (int32 0..15 [G, BR, NT, BC]) two per byte in registers and store
    them: ptr[e // 2] = code(e) | code(e + 1) << 4 for the even storage offsets e of
    ``elems`` (``storage_offsets``; -1 is not stored). Blocks have an even size, so e and
    e + 1 are neighbours in one block and e is even."""
    lo, hi = _pairs(codes, BR, BC, G, NT)
    e, _ = _pairs(elems, BR, BC, G, NT)
    tl.store(ptr + e // 2, (lo | (hi << 4)).to(tl.uint8), mask=e >= 0)


def storage_shapes(shape: torch.Size, layout: Layout) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """x's shape -> (elements, scales) shapes of the storage form, one element per value
    (FP4 packs two per byte along the last dim): ``blocks.canonical`` and ``store_scales``."""
    if layout.kind == "tensor":
        return tuple(shape), (1,)
    b = layout.size
    if layout.kind == "2d":
        n_i, n_j = -(-shape[-2] // b), -(-shape[-1] // b)
        return (*shape[:-2], n_i * b, n_j * b), (*shape[:-2], n_i, n_j)
    a = layout.axis % len(shape)
    rest, n = (*shape[:a], *shape[a + 1:]), -(-shape[a] // b)
    return (*rest, n * b), (*rest, n)
