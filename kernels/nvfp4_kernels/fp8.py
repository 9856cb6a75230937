"""Fused FP8 (E4M3 / E5M2) current-scaling quantization: the ``fp8`` recipe's operands.

``fp8_operand(x, spec)`` returns ``formats.fake_quantize_parts(x, spec)[0]`` bit for bit: the
fp32 ``local`` = fp32(q) * scale_inv of every element, in x's shape. ``fp8_storage(x, spec)``
returns the same quantization in storage form, ``formats.quantize``'s data (the fp8 bytes of
q) and scales (fp32 scale_inv) in the storage layout of ``_storage``. Per block (``formats/fp8.py``,
TE's ``scale_from_amax_tensor``; docs/numerics.md, FP8):

    amax      = max |x| over the block            (zero padding never changes it)
    scale     = min(rdiv(fp8_max, amax), FLT_MAX) correctly rounded: ``tl.div_rn``
    scale     = 2^floor(log2 scale)               with pow2_scales: clear the mantissa bits
    q         = RNE(min(|x| * scale, fp8_max)) with x's sign
    local     = q * tl.div_rn(1, scale)           torch's ``1.0 / scale`` is correctly rounded

The reference's scale 1 for a zero block is not used to quantize: any finite scale gives the
block's +-0 bytes; it is stored as the block's scale_inv. A block holding NaN or Inf decodes
to NaN, and is stored as NaN bytes (0x7F) with a NaN scale_inv (the reference's NaN scale).

Layouts, over a 3-D view ``[P, R, C]`` of the contiguous input, one launch each:

    1d along the last axis   [1, rows, L]    blocks (1, b)   e.g. FP8 1x128 activations
    1d along another axis a  [P, L_a, Q]     blocks (b, 1)   the Wgrad operands (axis 0)
    2d tiles                 [P, R, C]       blocks (b, b)   128x128 weights
    tensor                   flat            two launches: an amax reduction into one int32
                                             by ``atomic_max`` on the fp32 bits (monotone for
                                             non-negative floats), then the quantization; the
                                             scale never leaves the device (no host sync)

A program loads a tile ``[BR, NB, TC]`` (NB blocks of TC columns side by side, BR rows) and
reduces over the block's axes; everything after the load is elementwise.

The rounding is written with bit operations, because the interpreter's fp32 -> fp8 cast is
not RNE (docs/triton.md); the same code is exact on a GPU:

* normal range (a >= 2^emin): round the 23-bit mantissa to 3 (E4M3) or 2 (E5M2) bits, half to
  even, on the raw bits: add half an ulp minus one plus the lowest kept bit, shift it out;
* subnormal range: ``(a + C) - C`` with C = 2^(emin - m + 23): the fp32 sum has an ulp of one
  fp8 subnormal step, so the addition rounds a to a multiple of it, ties to even;
* a is clamped to fp8_max before rounding (saturation), so nothing rounds above the grid.

The sign bit is put back last, with integer operations (Triton's ``-v`` is ``0 - v``, which
gives +0.0 for v = 0), so negative values that round to zero give -0.0, as torch's cast does.
NaN payloads and signs are not specified.

FMA contraction: the only additions are ``(a + C) - C``, and ``a`` is the output of a
``min``, never a product, so no multiply-add can form; the launches pass
``enable_fp_fusion=False`` as well. Divisions use ``tl.div_rn`` (Triton's ``/`` is
approximate on GPUs). Denormals: Triton flushes them only inside libdevice calls, and no
libdevice function is used, so fp32 subnormal inputs, scales and outputs are kept.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from nvfp4_lab.formats import QuantSpec, fake_quantize_parts

from ._bits import fp8_bits
from ._storage import canonical_index, storage_shapes

FP8_FORMATS = ("fp8_e4m3", "fp8_e5m2")
# fmt -> (fp8_max, mantissa bits, exponent of the smallest normal)
FORMAT = {"fp8_e4m3": (448.0, 3, -6), "fp8_e5m2": (57344.0, 2, -14)}
FP8_DTYPES = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
TILE = 8192  # elements per program, about (a 128x128 tile is one program: 16384)

_FLT_MAX = tl.constexpr(3.4028234663852886e38)
_INF = tl.constexpr(float("inf"))
# NaN is written in the kernels as float("nan"), never a global: each launch checks that the
# globals a kernel read still equal their values at compile time, and NaN != NaN.


def supports(spec: QuantSpec) -> bool:
    """FP8 E4M3/E5M2, any layout (1D blocks along any axis, 2D tiles, per tensor), without an
    RHT; pow2 scales on or off."""
    return spec.fmt in FP8_FORMATS and spec.rht is None


# ------------------------------------------------------------------------------ Triton


@triton.jit
def _magnitude(x):
    """|x| in fp32, with NaN mapped to +inf, so a max reduction flags non-finite blocks."""
    a = tl.abs(x)
    return tl.where(a <= _FLT_MAX, a, _INF)


@triton.jit
def _encode_scale(amax, FP8_MAX: tl.constexpr, POW2: tl.constexpr):
    """Block amax (fp32, +inf for a non-finite block) -> encode scale.

    A zero or non-finite block divides by 1 instead: the reference's scale 1 for a zero block
    is not needed, since its elements decode to +-0 under any finite scale, and a non-finite
    block decodes to NaN whatever its scale (``_quantize``).
    """
    ordinary = (amax > 0) & (amax <= _FLT_MAX)
    scale = tl.minimum(tl.div_rn(FP8_MAX, tl.where(ordinary, amax, 1.0)), _FLT_MAX)
    if POW2:
        scale = (scale.to(tl.int32, bitcast=True) & 0x7F800000).to(tl.float32, bitcast=True)
    return scale


@triton.jit
def _quantize(x, scale, amax, CODES: tl.constexpr, FP8_MAX: tl.constexpr,
              MBITS: tl.constexpr, MIN_NORMAL: tl.constexpr, SUB_ROUNDER: tl.constexpr,
              EMIN: tl.constexpr):
    """x (fp32) and its block's encode scale and amax -> (out, scale_inv), q = fp8 RNE(x * scale):

    out        CODES=False: fp32(q) / scale (local), NaN in a non-finite block;
               CODES=True: q's byte (uint8, what torch's fp8 cast stores), 0x7F (NaN) in a
               non-finite block;
    scale_inv  the block's stored fp32 decode scale (CODES): 1 / scale, but the reference's 1
               for a zero block (which ``_encode_scale`` skips) and NaN for a non-finite one.

    (One function holds every NaN constant: Triton refuses a kernel whose inner functions
    share a global that is not equal to itself.)
    """
    a = tl.minimum(tl.abs(x) * scale, FP8_MAX)
    bits = a.to(tl.int32, bitcast=True)
    drop: tl.constexpr = 23 - MBITS
    bits = ((bits + ((1 << (drop - 1)) - 1) + ((bits >> drop) & 1)) >> drop) << drop
    normal = bits.to(tl.float32, bitcast=True)
    subnormal = (a + SUB_ROUNDER) - SUB_ROUNDER
    mag = tl.where(a >= MIN_NORMAL, normal, subnormal)
    # x's sign goes on the bits (Triton's -v is 0 - v, which turns -0.0 into +0.0)
    neg = (x.to(tl.int32, bitcast=True) < 0).to(tl.int32)
    finite = amax <= _FLT_MAX
    inv = tl.div_rn(1.0, scale)
    if CODES:
        out = tl.where(finite, fp8_bits(mag, MBITS, EMIN) | (neg << 7), 0x7F).to(tl.uint8)
    else:
        v = (mag * inv).to(tl.int32, bitcast=True) | (neg << 31)
        out = tl.where(finite, v.to(tl.float32, bitcast=True), float("nan"))
    return out, tl.where(amax == 0, 1.0, tl.where(finite, inv, float("nan")))


@triton.jit
def _blocks_kernel(x_ptr, out_ptr, scale_ptr, R, C, n_r, n_c,
                   BR: tl.constexpr, NB: tl.constexpr, TC: tl.constexpr,
                   ROW_BLOCKS: tl.constexpr, CODES: tl.constexpr, TRANS: tl.constexpr,
                   FP8_MAX: tl.constexpr, POW2: tl.constexpr, MBITS: tl.constexpr,
                   MIN_NORMAL: tl.constexpr, SUB_ROUNDER: tl.constexpr, EMIN: tl.constexpr):
    """x viewed as [P, R, C]; one program quantizes a [BR, NB * TC] tile of one batch p.

    A block is TC consecutive columns, of one row (ROW_BLOCKS) or of all BR rows. CODES=False:
    out_ptr (fp32, x's shape) <- local. CODES=True: out_ptr (uint8) <- fp8 bytes and
    scale_ptr (fp32) <- decode scales, both in the storage layout (``_storage``), the
    transposed one (TRANS) for 1D blocks along R.
    """
    pid = tl.program_id(0)
    pc = pid % n_c
    pr = (pid // n_c) % n_r
    pp = (pid // (n_c * n_r)).to(tl.int64)
    rows = pr * BR + tl.arange(0, BR)[:, None, None]
    cols = (pc * (NB * TC) + tl.arange(0, NB)[None, :, None] * TC
            + tl.arange(0, TC)[None, None, :])
    offs = pp * R * C + rows.to(tl.int64) * C + cols
    mask = (rows < R) & (cols < C)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    amax = tl.max(_magnitude(x), axis=2, keep_dims=True)  # [BR, NB, 1]
    if not ROW_BLOCKS:
        amax = tl.max(amax, axis=0, keep_dims=True)  # [1, NB, 1]
    scale = _encode_scale(amax, FP8_MAX, POW2)
    out, scale_inv = _quantize(x, scale, amax, CODES, FP8_MAX, MBITS, MIN_NORMAL,
                               SUB_ROUNDER, EMIN)
    if CODES:
        # block (i, j) of n_i x n_j, R_pad = n_i * its height; padded elements are stored too
        n_j = tl.cdiv(C, TC)
        j = pc * NB + tl.arange(0, NB)[None, :, None]  # [1, NB, 1]
        if ROW_BLOCKS:
            i = rows  # [BR, 1, 1]
            n_i = R
            r_pad = R
        else:
            i = pr + tl.zeros([1, 1, 1], tl.int32)  # a tensor: a scalar compare is no mask
            n_i = n_r
            r_pad = n_r * BR
        inside = (i < n_i) & (j < n_j)
        elems = canonical_index(pp, rows, cols, r_pad, n_j * TC, TRANS)
        tl.store(out_ptr + elems, out, mask=inside)
        blocks = canonical_index(pp, i, j, n_i, n_j, TRANS)
        tl.store(scale_ptr + blocks, scale_inv, mask=inside)
    else:
        tl.store(out_ptr + offs, out, mask=mask)


@triton.jit
def _amax_kernel(x_ptr, amax_ptr, N, BLOCK: tl.constexpr):
    """Pass 1 of per-tensor scaling: the max |x| (NaN as inf) into amax_ptr's int32 bits."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < N, other=0.0).to(tl.float32)
    amax = tl.max(_magnitude(x), axis=0)
    tl.atomic_max(amax_ptr, amax.to(tl.int32, bitcast=True))


@triton.jit
def _tensor_kernel(x_ptr, amax_ptr, out_ptr, scale_ptr, N, BLOCK: tl.constexpr,
                   CODES: tl.constexpr, FP8_MAX: tl.constexpr, POW2: tl.constexpr,
                   MBITS: tl.constexpr, MIN_NORMAL: tl.constexpr, SUB_ROUNDER: tl.constexpr,
                   EMIN: tl.constexpr):
    """Pass 2 of per-tensor scaling: quantize with the tensor amax from pass 1. The storage
    layout is x's own; CODES: program 0 also stores the decode scale (scale_ptr: fp32 [1])."""
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    amax = tl.load(amax_ptr).to(tl.float32, bitcast=True)
    scale = _encode_scale(amax, FP8_MAX, POW2)
    out, scale_inv = _quantize(x, scale, amax, CODES, FP8_MAX, MBITS, MIN_NORMAL,
                               SUB_ROUNDER, EMIN)
    tl.store(out_ptr + offs, out, mask=mask)
    if CODES:
        tl.store(scale_ptr, scale_inv, mask=pid == 0)


# ------------------------------------------------------------------------------ host


def _format_args(spec: QuantSpec) -> dict:
    """The constexprs of a format: fp8_max, mantissa bits, smallest normal (and its exponent),
    and the constant whose fp32 ulp is the fp8 subnormal step."""
    fp8_max, mbits, emin = FORMAT[spec.fmt]
    return dict(FP8_MAX=fp8_max, POW2=bool(spec.pow2_scales), MBITS=mbits,
                MIN_NORMAL=2.0 ** emin, SUB_ROUNDER=2.0 ** (emin - mbits + 23), EMIN=emin)


def _pow2(n: int) -> int:
    return triton.next_power_of_2(max(int(n), 1))


def _view(x: torch.Tensor, spec: QuantSpec) -> tuple[tuple[int, int, int], int, int, bool]:
    """x's shape as (P, R, C) with blocks of TR x TC elements: (shape, TR, TC, row_blocks)."""
    layout, shape = spec.layout, x.shape
    if layout.kind == "2d":
        return (math.prod(shape[:-2]), shape[-2], shape[-1]), layout.size, layout.size, False
    a = layout.axis % x.dim()
    p, length, q = math.prod(shape[:a]), shape[a], math.prod(shape[a + 1:])
    if q == 1:  # blocks along the innermost dim: rows of length L
        return (1, p, length), 1, layout.size, True
    return (p, length, q), layout.size, 1, False


def _tile(view: tuple[int, int, int], tr: int, tc: int, row_blocks: bool) -> tuple[int, int]:
    """(BR, NB): rows and blocks per program, about TILE elements."""
    _, r, c = view
    if row_blocks:  # (1, b): up to 1024 columns, then rows
        nb = max(1, min(_pow2(c), 1024) // tc)
        return max(1, min(_pow2(r), TILE // (nb * tc))), nb
    return tr, max(1, min(_pow2(-(-c // tc)), TILE // (tr * tc)))


def _launch_blocks(x: torch.Tensor, out: torch.Tensor, scales: torch.Tensor | None,
                   spec: QuantSpec) -> None:
    view, tr, tc, row_blocks = _view(x, spec)
    br, nb = _tile(view, tr, tc, row_blocks)
    p, r, c = view
    n_r, n_c = triton.cdiv(r, br), triton.cdiv(c, nb * tc)
    _blocks_kernel[(p * n_r * n_c,)](
        x, out, scales, r, c, n_r, n_c, BR=br, NB=nb, TC=tc, ROW_BLOCKS=row_blocks,
        CODES=scales is not None, TRANS=spec.layout.kind == "1d" and not row_blocks,
        num_warps=8 if br * nb * tc >= 8192 else 4, enable_fp_fusion=False,
        **_format_args(spec))


def _launch_tensor(x: torch.Tensor, out: torch.Tensor, scales: torch.Tensor | None,
                   spec: QuantSpec) -> None:
    n = x.numel()
    block = min(TILE, _pow2(n))
    grid = (triton.cdiv(n, block),)
    amax = torch.zeros(1, dtype=torch.int32, device=x.device)
    _amax_kernel[grid](x, amax, n, BLOCK=block, num_warps=8)
    _tensor_kernel[grid](x, amax, out, scales, n, BLOCK=block, CODES=scales is not None,
                         num_warps=8, enable_fp_fusion=False, **_format_args(spec))


def _covers(x: torch.Tensor, spec: QuantSpec) -> bool:
    """Whether the kernels take x: non-empty, fp32/bf16/fp16, of a shape the layout blocks
    (0-d tensors have no axis, 2D tiles need 2 dims)."""
    min_dims = {"tensor": 0, "1d": 1, "2d": 2}[spec.layout.kind]
    return x.dim() >= min_dims and x.numel() > 0 and x.dtype in KERNEL_DTYPES


def _run(x: torch.Tensor, spec: QuantSpec, out: torch.Tensor,
         scales: torch.Tensor | None) -> None:
    launch = _launch_tensor if spec.layout.kind == "tensor" else _launch_blocks
    launch(x.contiguous(), out, scales, spec)


def fp8_operand(x: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """x [any shape] fp32/bf16/fp16 -> local fp32 [x.shape], ``fake_quantize_parts(x, spec)[0]``.

    Shapes the layout cannot block (0-d, 1-d for 2D tiles), empty tensors and other dtypes go
    to the reference, which raises or answers as it always does.
    """
    if not _covers(x, spec):
        return fake_quantize_parts(x, spec)[0]
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    _run(x, spec, out, None)
    return out


def fp8_storage(x: torch.Tensor, spec: QuantSpec) -> tuple[torch.Tensor, torch.Tensor] | None:
    """x [any shape] fp32/bf16/fp16 -> (data, scales), ``formats.quantize(x, spec)``'s fields
    byte for byte: data float8_e4m3fn / float8_e5m2 and scales fp32 (scale_inv) in the
    storage layout. None for the inputs ``fp8_operand`` hands to the reference."""
    if not _covers(x, spec):
        return None
    elems, blocks = storage_shapes(x.shape, spec.layout)
    data = torch.empty(elems, dtype=torch.uint8, device=x.device)
    scales = torch.empty(blocks, dtype=torch.float32, device=x.device)
    _run(x, spec, data, scales)
    return data.view(FP8_DTYPES[spec.fmt]), scales
