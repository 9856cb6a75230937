"""The random Hadamard transform as a Triton butterfly, bit-identical to the reference.

``nvfp4_lab.formats.hadamard.rht_dim`` transforms each chunk v of d consecutive elements along
an axis as ((v * s) . H_d) * fp32(1/sqrt(d)) in FP32, by log2(d) butterfly stages (stage h
turns the pair (a, b) = (v[j], v[j + h]), j with bit h clear, into (a + b, a - b)), and rounds
the result once to the input dtype. The order of every FP32 addition is fixed by the stages,
so this kernel reproduces the reference bit for bit by running the same stages on a register
tile; a ``tl.dot`` with the H_d matrix would leave the summation order to the tensor cores.

One program transforms one chunk [D, BLOCK_O]: D consecutive elements along the transform
axis times BLOCK_O along the other axis (strided pointers, so the same kernel serves the
token axis of the Wgrad operands, axis 0, and the last axis). A stage is a reshape that puts
the butterfly pair in a trailing dimension of 2, ``tl.split`` into (a, b), ``tl.join`` of
(a + b, a - b), and the inverse reshape.

Launched with ``enable_fp_fusion=False``: the sign flip (v * s) is exact, so an FMA could not
change a result, but the rule holds for every kernel here.

The result is rounded to the input dtype. For BF16 the rounding is written with bit
operations (round-half-even on the fp32 bits): Triton's interpreter does not round an fp32
to bf16 cast to nearest-even, and on the GPU the two are the same.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _stage(v, D: tl.constexpr, H: tl.constexpr, BLOCK_O: tl.constexpr):
    """One butterfly stage on v [D, BLOCK_O] along dim 0: pairs (j, j + H), j with bit H
    clear, become (a + b, a - b)."""
    w = tl.reshape(v, (D // (2 * H), 2, H * BLOCK_O))  # [D/2H, pair, H * BLOCK_O]
    w = tl.permute(w, (0, 2, 1))                       # [D/2H, H * BLOCK_O, pair]
    a, b = tl.split(w)
    w = tl.permute(tl.join(a + b, a - b), (0, 2, 1))   # [D/2H, pair, H * BLOCK_O]
    return tl.reshape(w, (D, BLOCK_O))


@triton.jit
def _round_bf16(v):
    """fp32 -> bf16 bits (uint16), round-half-even; a NaN stays a quiet NaN."""
    u = v.to(tl.uint32, bitcast=True)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    r = tl.where(v != v, (u >> 16) | 0x40, r)
    return r.to(tl.uint16)


@triton.jit
def _rht_kernel(x_ptr, y_ptr, signs_ptr, n_other, stride_t, stride_o, norm,
                D: tl.constexpr, LOG_D: tl.constexpr, BLOCK_O: tl.constexpr,
                BF16: tl.constexpr):
    chunk = tl.program_id(0)
    o = tl.program_id(1) * BLOCK_O + tl.arange(0, BLOCK_O)
    j = tl.arange(0, D)
    offs = (chunk * D + j)[:, None] * stride_t + o[None, :] * stride_o  # [D, BLOCK_O]
    mask = (o < n_other)[None, :]
    v = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    v = v * tl.load(signs_ptr + j)[:, None]
    for k in tl.static_range(LOG_D):
        v = _stage(v, D, 1 << k, BLOCK_O)
    v = v * norm
    if BF16:
        tl.store(y_ptr + offs, _round_bf16(v).to(tl.bfloat16, bitcast=True), mask=mask)
    else:
        tl.store(y_ptr + offs, v, mask=mask)


def _norm(d: int) -> float:
    """fp32(1/sqrt(d)), as the reference rounds it (exact when log2 d is even)."""
    return float(torch.tensor(2.0 ** (-(d.bit_length() - 1) / 2), dtype=torch.float32))


def rht_2d(x: torch.Tensor, signs: torch.Tensor, axis: int) -> torch.Tensor:
    """The forward RHT of a 2D x [R, C] along ``axis`` (0 or 1) in chunks of len(signs).

    x: fp32 or bf16, its length along ``axis`` a multiple of d = len(signs) (the caller
    checks, as the reference does); signs: +-1 [d]. Returns a new tensor of x's dtype and
    shape, equal to ``rht_dim(x, signs, axis)`` bit for bit.
    """
    if x.dim() != 2 or x.dtype not in (torch.float32, torch.bfloat16):
        raise NotImplementedError(f"rht_2d takes a 2D fp32/bf16 tensor, got {x.dtype} "
                                  f"{tuple(x.shape)}")
    d = signs.numel()
    x = x.contiguous()
    y = torch.empty_like(x)
    axis %= 2
    n_t, n_o = x.shape[axis], x.shape[1 - axis]
    block_o = max(16, min(128, 4096 // d))  # a tile of ~4k elements
    grid = (n_t // d, triton.cdiv(n_o, block_o))
    _rht_kernel[grid](x, y, signs.to(device=x.device, dtype=torch.float32).contiguous(), n_o,
                      x.stride(axis), x.stride(1 - axis), _norm(d), D=d,
                      LOG_D=d.bit_length() - 1, BLOCK_O=block_o,
                      BF16=x.dtype == torch.bfloat16, enable_fp_fusion=False)
    return y
