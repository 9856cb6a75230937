"""Block layouts: which elements share a scale.

A layout is one of
* 1D blocks of ``size`` consecutive elements along ``axis`` (NVFP4 1x16, MXFP4 1x32, FP8 1x128);
* 2D ``size x size`` tiles over the last two dims (weights: NVFP4 16x16, MXFP4 32x32,
  FP8 128x128). A tile shares one scale, so quantizing W^T gives exactly the transpose of
  quantizing W (paper Sec. 4.3);
* the whole tensor (per-tensor FP8 scaling).

The quantizers work on the *blocked view*: x zero-padded to whole blocks, then split *in
place* so that each block spans ``dims``:

    1D along axis a:  [..., L, ...]  -> [..., L/b, b, ...]         dims = (a + 1,)
    2D tiles:         [..., R, C]    -> [..., R/b, b, C/b, b]      dims = (-3, -1)
    per tensor:       x as it is                                    dims = all

Reductions use keepdim, so block scales broadcast back onto their elements. Nothing is
transposed: blocks along dim 0 reduce over a middle dim while the innermost, contiguous dim
stays innermost, which is what lets torch.compile vectorise the Wgrad (token-axis) case.
Padding never changes a block amax (|0| <= anything) and is stripped again on the way back.

QTensor stores codes and scales in the *canonical* layout, blocked axis last (the layout TE
and torchao use, packing two codes per byte along the block): 1D ``[..., L_pad]`` with the
axis moved last, scales ``[..., L_pad/b]``; 2D ``[..., R_pad, C_pad]``, scales
``[..., R_pad/b, C_pad/b]``; per tensor, scales ``[1]``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .spec import Layout


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def pad(x: torch.Tensor, layout: Layout, multiple: int = 1) -> torch.Tensor:
    """Zero-pad x in place to whole blocks (and to ``multiple``: a Hadamard size, or 2 so that
    FP4 codes pack into bytes)."""
    if layout.kind == "tensor":
        return x
    b = max(layout.size, multiple)
    if layout.kind == "1d":
        if x.dim() == 0:
            raise ValueError("cannot block a 0-d tensor along an axis")
        a = layout.axis % x.dim()
        widths = [0, 0] * (x.dim() - 1 - a) + [0, _round_up(x.shape[a], b) - x.shape[a]]
        return F.pad(x, widths)
    if x.dim() < 2:
        raise ValueError(f"2D tiles need at least 2 dims, got shape {tuple(x.shape)}")
    r, c = x.shape[-2:]
    return F.pad(x, (0, _round_up(c, b) - c, 0, _round_up(r, b) - r))


def unpad(p: torch.Tensor, layout: Layout, shape: torch.Size) -> torch.Tensor:
    """Inverse of ``pad``: the leading ``shape`` region."""
    if layout.kind == "tensor":
        return p
    return p[tuple(slice(0, n) for n in shape)]


def to_blocks(p: torch.Tensor, layout: Layout) -> tuple[torch.Tensor, tuple[int, ...]]:
    """Padded tensor -> (blocked view, the dims one block spans). See the module docstring."""
    if layout.kind == "tensor":
        return p, tuple(range(p.dim()))
    b = layout.size
    if layout.kind == "1d":
        a = layout.axis % p.dim()
        return p.unflatten(a, (-1, b)), (a + 1,)  # [..., L/b, b, ...]
    return p.unflatten(-1, (-1, b)).unflatten(-3, (-1, b)), (-3, -1)  # [..., R/b, b, C/b, b]


def from_blocks(xb: torch.Tensor, layout: Layout) -> torch.Tensor:
    """Blocked view -> padded tensor."""
    if layout.kind == "tensor":
        return xb
    if layout.kind == "1d":
        a = layout.axis % (xb.dim() - 1)
        return xb.flatten(a, a + 1)
    return xb.flatten(-2, -1).flatten(-3, -2)


def canonical(p: torch.Tensor, layout: Layout, multiple: int = 1) -> torch.Tensor:
    """x -> the storage layout of QTensor: padded, blocked axis last (1D)."""
    p = pad(p, layout, multiple)
    return p.movedim(layout.axis, -1) if layout.kind == "1d" else p


def from_canonical(c: torch.Tensor, layout: Layout) -> torch.Tensor:
    """Storage layout -> padded in-place layout."""
    return c.movedim(-1, layout.axis) if layout.kind == "1d" else c


def store_scales(s: torch.Tensor, layout: Layout) -> torch.Tensor:
    """Block scales with keepdim shape -> storage shape (see the module docstring)."""
    if layout.kind == "tensor":
        return s.reshape(1)
    if layout.kind == "1d":
        a = layout.axis % (s.dim() - 1)
        return s.squeeze(a + 1).movedim(a, -1)
    return s.squeeze(-1).squeeze(-2)


def load_scales(s: torch.Tensor, layout: Layout, ndim: int) -> torch.Tensor:
    """Storage shape -> keepdim shape broadcasting over a blocked view of ``ndim`` dims."""
    if layout.kind == "tensor":
        return s.reshape([1] * ndim)
    if layout.kind == "1d":
        a = layout.axis % (ndim - 1)
        return s.movedim(-1, a).unsqueeze(a + 1)
    return s.unsqueeze(-1).unsqueeze(-3)


def ordered_sum(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sum over ``dim`` one slice at a time, in index order (keepdim): a fixed order of fp32
    additions, the same in eager and compiled code (``torch.sum`` leaves it to the kernel).
    4/6 and MS-EDEN decide scales from such sums, so their order is part of the result."""
    acc = t.narrow(dim, 0, 1)
    for i in range(1, t.shape[dim]):
        acc = acc + t.narrow(dim, i, 1)
    return acc
