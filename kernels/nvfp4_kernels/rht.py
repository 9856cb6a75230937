"""The random Hadamard transform inside the FP4 tile loader, bit-identical to the reference.

``nvfp4_lab.formats.hadamard.rht_dim`` transforms each chunk v of d consecutive elements along
an axis as ((v * s) . H_d) * fp32(1/sqrt(d)) in FP32, by log2(d) butterfly stages (stage h
turns the pair (a, b) = (v[j], v[j + h]), j with bit h clear, into (a + b, a - b)), and rounds
the result once to the input dtype. The order of every FP32 addition is fixed by the stages,
so running the same stages on the register tile reproduces the reference bit for bit. The
issue suggested a ``tl.dot`` with the H_d matrix; a dot leaves the summation order to the
tensor cores (and rounds its fp32 inputs to TF32 unless told otherwise), so its results would
differ from the reference's in the last bits of chunks whose partial sums are inexact.

``rotate_tile`` transforms the tile an FP4 kernel has just loaded (``fp4.py``), before the
amax (pass 1) and the quantization (pass 2) see it: the rotated tensor never reaches memory,
and its amax is the post-transform amax the paper prescribes (App. C). Both passes recompute
the butterfly (log2 d additions an element), which costs less than writing and re-reading
the rotated tensor. A tile must hold whole chunks, so its extent along the transform axis is
a multiple of d (``fp4._tiles``); the axis length is a multiple of d (the reference's rule,
checked on the host), so a chunk is either wholly inside x or wholly padding (zeros).

A stage is a reshape that puts the butterfly pair in a dimension of 2, ``tl.split`` into
(a, b), ``tl.join`` of (a + b, a - b), and the inverse reshape. The tile is ``[G, BR, NT, BC]``
(``_bits``); merged to ``[G * BR, NT * BC]`` (row-major, so a valid reshape), the transform
runs down the rows (blocks along R: the token axis of the Wgrad operands) or, transposed,
along the columns (blocks along the last axis).

The sign flip (v * s) and the 1/sqrt(d) scaling are exact or rounded once, as in the
reference; no product feeds an addition except the exact sign flip, so an FMA could not change
a result (the kernels run with ``enable_fp_fusion=False`` regardless). The result is rounded
to the input dtype: BF16 with bit operations (round-half-even on the fp32 bits: Triton's
interpreter does not round an fp32 to bf16 cast to nearest-even; on the GPU the two agree),
FP16 with the cast (RNE in both).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._bits import round_bf16

# RHT_ROUND values: the input dtype the rotated tile is rounded to, as the reference does
ROUND_NONE, ROUND_BF16, ROUND_FP16 = 0, 1, 2
_ROUND = {torch.bfloat16: ROUND_BF16, torch.float16: ROUND_FP16}


def round_mode(dtype: torch.dtype) -> int:
    """The RHT_ROUND constexpr for an input dtype (fp32 and host-cast dtypes: none)."""
    return _ROUND.get(dtype, ROUND_NONE)


def norm(d: int) -> float:
    """fp32(1/sqrt(d)), as the reference rounds it (exact when log2 d is even)."""
    return float(torch.tensor(2.0 ** (-(d.bit_length() - 1) / 2), dtype=torch.float32))


@triton.jit
def _stage(v, T: tl.constexpr, H: tl.constexpr, W: tl.constexpr):
    """One butterfly stage on v [T, W] down dim 0: pairs (j, j + H), j with bit H clear,
    become (a + b, a - b). T is a multiple of 2H, so chunks never mix."""
    w = tl.reshape(v, (T // (2 * H), 2, H * W))  # [T/2H, pair, H * W]
    w = tl.permute(w, (0, 2, 1))                 # [T/2H, H * W, pair]
    a, b = tl.split(w)
    w = tl.permute(tl.join(a + b, a - b), (0, 2, 1))  # [T/2H, pair, H * W]
    return tl.reshape(w, (T, W))


@triton.jit
def _butterfly(v, T: tl.constexpr, W: tl.constexpr, LOG_D: tl.constexpr):
    """v [T, W] -> each chunk of 2^LOG_D consecutive rows times H_d (unnormalised)."""
    for k in tl.static_range(LOG_D):
        v = _stage(v, T, 1 << k, W)
    return v


@triton.jit
def rotate_tile(x, signs_ptr, norm, r, c, BR: tl.constexpr, BC: tl.constexpr,
                G: tl.constexpr, NT: tl.constexpr, LOG_D: tl.constexpr,
                ALONG_R: tl.constexpr, ROUND: tl.constexpr):
    """x: fp32 [G, BR, NT, BC] tile -> its RHT along R (ALONG_R) or C in chunks of
    d = 2^LOG_D, rounded to the input dtype (ROUND) and returned as fp32.

    signs_ptr: fp32 [d] +-1; norm: fp32(1/sqrt(d)); r: int64 [G, BR, 1, 1] and c: int64
    [1, 1, NT, BC], the tile's element rows and columns (``_bits.tile_coords``). The tile's
    extent along the axis (G * BR or NT * BC) is a multiple of d and starts at one.
    """
    D: tl.constexpr = 1 << LOG_D
    if ALONG_R:
        v = x * tl.load(signs_ptr + r % D)
        v = _butterfly(tl.reshape(v, (G * BR, NT * BC)), G * BR, NT * BC, LOG_D)
    else:
        v = x * tl.load(signs_ptr + c % D)
        v = tl.trans(tl.reshape(v, (G * BR, NT * BC)))  # [NT * BC, G * BR]
        v = tl.trans(_butterfly(v, NT * BC, G * BR, LOG_D))
    v = tl.reshape(v, (G, BR, NT, BC)) * norm
    if ROUND == 1:  # ROUND_BF16
        v = round_bf16(v)
    elif ROUND == 2:  # ROUND_FP16
        v = v.to(tl.float16).to(tl.float32)
    return v
