"""A GEMM's epilogue in one launch: NVFP4's alpha, the rounding to the compute dtype, the store.

The emulated GEMM (``nvfp4_lab.quant.gemm``) multiplies block-scaled locals into an FP32 Y.
Its reference epilogue is a chain of torch ops, one launch each on a GPU: the amaxes' product,
a full tensor of the divisor and the division (alpha = fp32(A_a * A_b) / (6 L_a * 6 L_b),
``formats.nvfp4.gemm_alpha``), Y * alpha, the cast to the compute dtype (BF16 under autocast)
and, for dW, the cast back to the master weight's FP32. ``gemm_epilogue`` computes the same
bits in one launch: each program derives alpha from the amaxes on the device with the same FP32
product and a correctly rounded division (``tl.div_rn``, as torch divides by a tensor),
multiplies its elements (no product feeds an addition), and rounds them to BF16 with bit
operations (``_bits.round_bf16``: half to even, subnormals kept; the interpreter's cast
flushes them), storing BF16 or the rounded value in FP32.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._bits import round_bf16

_BLOCK = 4096  # elements a program: the epilogue is a plain elementwise pass
_DTYPES = (torch.float32, torch.bfloat16)


@triton.jit
def _epilogue_kernel(y_ptr, out_ptr, amax_a_ptr, amax_b_ptr, divisor, N,
                     BLOCK: tl.constexpr, AMAXES: tl.constexpr, ROUND_BF16: tl.constexpr,
                     OUT_BF16: tl.constexpr):
    """out[i] <- round(y[i] * alpha): alpha = fp32(A_a * A_b) / divisor (AMAXES 2), A_a /
    divisor (1) or none (0), fp32 0-d amaxes; rounded to BF16 when ROUND_BF16, stored as
    BF16 (OUT_BF16) or fp32."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    if AMAXES == 2:
        y = y * tl.div_rn(tl.load(amax_a_ptr) * tl.load(amax_b_ptr), divisor)
    elif AMAXES == 1:
        y = y * tl.div_rn(tl.load(amax_a_ptr), divisor)
    if ROUND_BF16:
        y = round_bf16(y)
    if OUT_BF16:  # the top half of the rounded bits: exact, no cast
        y = (y.to(tl.uint32, bitcast=True) >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    tl.store(out_ptr + offs, y, mask=mask)


def supports(y: torch.Tensor, amaxes: tuple[torch.Tensor, ...], round_to: torch.dtype,
             dtype: torch.dtype) -> bool:
    """Whether ``gemm_epilogue`` computes this epilogue: an fp32 Y, at most two fp32 0-d
    amaxes (a row-scaled amax is a column), BF16 or FP32 rounding and storage."""
    return (y.dtype == torch.float32 and len(amaxes) <= 2
            and all(a.dim() == 0 and a.dtype == torch.float32 for a in amaxes)
            and round_to in _DTYPES and dtype in _DTYPES)


def gemm_epilogue(y: torch.Tensor, amaxes: tuple[torch.Tensor, ...], divisor: float,
                  round_to: torch.dtype, dtype: torch.dtype) -> torch.Tensor:
    """fp32 Y [any shape] -> ``(y * alpha).to(round_to).to(dtype)`` bit for bit (NaN payloads
    aside), alpha = fp32(product of ``amaxes``) / ``divisor`` correctly rounded (none without
    amaxes), in one launch; Y itself where there is nothing to do. ``supports`` must hold."""
    if not supports(y, amaxes, round_to, dtype):
        raise ValueError(f"no epilogue kernel for {y.dtype} output, amaxes "
                         f"{[tuple(a.shape) for a in amaxes]}, {round_to} -> {dtype}")
    bf16 = torch.bfloat16 in (round_to, dtype)
    if not (amaxes or bf16):
        return y
    y = y.contiguous()
    out = torch.empty(y.shape, dtype=dtype, device=y.device)
    if not y.numel():
        return out
    a, b = (*amaxes, None, None)[:2]
    grid = (triton.cdiv(y.numel(), _BLOCK),)
    _epilogue_kernel[grid](y, out, a, b, float(divisor), y.numel(), BLOCK=_BLOCK,
                           AMAXES=len(amaxes), ROUND_BF16=bf16,
                           OUT_BF16=dtype == torch.bfloat16, enable_fp_fusion=False)
    return out
