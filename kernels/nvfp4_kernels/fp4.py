"""Fused NVFP4 / MXFP4 quantization kernels: ``fp4_operand`` and ``fp4_storage(x, spec, key)``.

What is computed
----------------
``fp4_operand`` returns what ``nvfp4_lab.formats.fake_quantize_parts(x, spec)`` returns, bit
for bit: ``local`` (fp32, x's shape) = E2M1 element value x fp32 block decode scale, and for
NVFP4 the fp32 0-d global decode scale A / 2688 (None for MXFP4). ``fp4_storage`` returns the
fields of ``formats.quantize(x, spec)``'s QTensor: packed E2M1 codes, E4M3 / E8M0 scale bytes
(storage layout of ``_storage``) and NVFP4's amax A. One kernel source serves both: the
constexpr ``CODES`` picks the output written from the same registers. Covered: NVFP4 with TE's
scale order ("te") and MXFP4 with ceil / floor / even E8M0 exponents; 1D blocks along any
axis and 2D tiles over the last two dims; RNE or stochastic rounding (hw8 and exact) with the
reference's counter-based bits; fp32 / bf16 / fp16 input (other dtypes are cast with
``.float()`` on the host, as the reference does). No RHT (``supports`` says no).

The tile
--------
x (made contiguous) is viewed as ``[P, R, C]`` and a block as a ``BR x BC`` rectangle:

    1D along the last axis    [1, rows, L]             BR = 1,    BC = size
    1D along axis a (not last) [prod(before), L, prod(after)]  BR = size, BC = 1
    2D tiles                  [batch, R, C]            BR = BC = size

Every program loads one ``[G, BR, NT, BC]`` tile (G block rows by NT block columns), so one
kernel serves all layouts; blocks along the token axis (the Wgrad operand) are read with the
contiguous dim innermost, never transposed. Partial blocks load zeros (the reference pads with
zeros); padding is never written. The element's linear offset in the tile is its row-major
index in x, the counter of its stochastic-rounding bits.

Passes over memory
------------------
* NVFP4: pass 1 reads x and reduces the amaxes of the finite blocks into one int32 with
  ``atomic_max`` (non-negative floats order like their bit patterns); pass 2 reads x again,
  loads A from the device, and writes ``local``. No host synchronisation: A stays on the
  device, and the returned global scale is the reference's own ``global_decode_scale`` (a
  torch op on the 0-d amax), so it equals the reference on each device.
* MXFP4: one pass (no tensor amax).
* Pass 2 writes 4 bytes an element (``local``), or with ``CODES`` half a byte an element and
  one a block (packed codes, scale bytes): 9/16 of a byte an element for NVFP4 1x16. Codes are
  packed in registers (``_storage.store_packed``), so no unpacked code reaches memory.
The atomic max is idempotent and pass 2 overwrites its output, so autotuning (which runs each
candidate config on the real buffers) cannot change a result.

How bit-exactness is achieved
-----------------------------
* Block and tensor amaxes are integer maxima of |x|'s bit patterns: exact for subnormals, and
  a block holding NaN or Inf is recognised by its amax bits (>= 0x7F800000) rather than by how
  a float max propagates NaN. Such a block is written as NaN and skipped by A. NaN payloads
  are not part of the contract: the reference's depend on which operand its vectorised CPU
  code (or the GPU's canonical NaN) propagates.
* Every division the reference performs is ``tl.div_rn`` (Triton's ``/`` is approximate on a
  GPU). The reference's ``1.0 / t`` is ``t.reciprocal()``, which is correctly rounded, so it is
  ``div_rn(1, t)`` here. Every multiplication is the reference's, in its order.
* E4M3 rounding uses bit operations and an exact fp32 addition (``_bits.e4m3_rne``), never
  ``.to(tl.float8e4nv)``; E8M0 exponents and 2^+-k come from the fp32 bit fields.
* Fused multiply-add: a GPU compiler may contract a product and a following addition into one
  FMA, which skips the product's rounding. Every product here that feeds an addition is exact
  (a power-of-two scaling, or an integer times a power of two), so contraction cannot change a
  result; the kernels are also launched with ``enable_fp_fusion=False`` so that this does not
  rest on that argument alone.
* Signs: NVFP4 takes the sign from ``y < 0`` (-0.0 becomes +0), MXFP4 from the sign bit
  (-0.0 stays -0.0), as the reference does. The sign is OR-ed into the bit pattern of the
  rounded magnitude: Triton's unary minus is ``0 - v``, which turns a rounded -0 into +0.

Interpreter (``TRITON_INTERPRET=1``, the CPU tests)
--------------------------------------------------
The interpreter runs the same code with numpy: fp32 arithmetic is IEEE RNE, ``tl.div_rn`` is
a numpy division, uint32 arithmetic wraps, ``atomic_max`` is sequential. Its fp8 cast is not
RNE, which is why it is not used. It has no FMA contraction and ignores
``enable_fp_fusion``. Autotuning is skipped under the interpreter (one fixed tile per layout),
since each candidate would be interpreted. numpy may warn about invalid operations on the
lanes of non-finite blocks; those lanes are overwritten with NaN.
"""
from __future__ import annotations

import functools
import math
import os

import torch
import triton
import triton.language as tl

from nvfp4_lab.formats import QuantSpec
from nvfp4_lab.formats.nvfp4 import global_decode_scale

from ._bits import (
    block_amax_bits,
    e2m1_code,
    e2m1_rne,
    e2m1_sr,
    e8m0_scales,
    fp8_bits,
    nvfp4_scales,
    random_bits,
    tile_offsets,
)
from ._storage import storage_offsets, storage_shapes, store_packed

_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
_NAN = tl.constexpr(float("nan"))  # written for a non-finite block (payload unspecified)
_KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# Largest block sizes with a kernel: a 2D tile of size^2 elements must fit in registers.
_MAX_SIZE = {"1d": 256, "2d": 64}


def supports(spec: QuantSpec) -> bool:
    """Whether ``fp4_operand`` computes ``spec``: NVFP4 ("te" order) or MXFP4, 1D blocks along
    any axis or 2D tiles, no RHT. Any rounding, any E8M0 mode."""
    if spec.fmt not in ("nvfp4", "mxfp4") or spec.rht is not None:
        return False
    if spec.fmt == "nvfp4" and spec.order != "te":
        return False
    layout = spec.layout
    return layout.kind in _MAX_SIZE and layout.size <= _MAX_SIZE[layout.kind]


@triton.jit
def _amax_kernel(x_ptr, amax_ptr, R, C, BR: tl.constexpr, BC: tl.constexpr,
                 G: tl.constexpr, NT: tl.constexpr):
    """Pass 1 (NVFP4): amax_ptr (int32 [1], zeroed) <- max over this tile's finite blocks of
    the block amax bits."""
    offs, mask = tile_offsets(R, C, BR, BC, G, NT)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)  # [G, BR, NT, BC]
    a_bits = block_amax_bits(x)  # [G, 1, NT, 1]
    tl.atomic_max(amax_ptr, tl.max(tl.where(a_bits < 0x7F800000, a_bits, 0)))


@triton.jit
def _quantize_kernel(x_ptr, out_ptr, scale_ptr, amax_ptr, key_ptr, R, C,
                     BR: tl.constexpr, BC: tl.constexpr, G: tl.constexpr, NT: tl.constexpr,
                     NVFP4: tl.constexpr, MX_MODE: tl.constexpr, SR: tl.constexpr,
                     SR_EXACT: tl.constexpr, CODES: tl.constexpr):
    """Pass 2: E2M1(x * enc_b) and dec_b for this tile (``nvfp4.quantize_blocks`` /
    ``mxfp4.quantize_blocks``), then one of two outputs:

    CODES=False  out_ptr: fp32 [x.shape] <- E2M1 value * dec_b (``decode_local``);
    CODES=True   out_ptr: uint8 packed codes, scale_ptr: uint8 scale bytes, both in the
                 storage layout (``_storage``); a non-finite block gets codes 0 and the NaN
                 scale byte (E4M3 0x7F, E8M0 0xFF), as ``e2m1.to_codes`` gives its NaNs.

    amax_ptr: int32 [1] bits of A (NVFP4; None for MXFP4); key_ptr: int64 [2] SR key (None
    for RNE); scale_ptr: None when CODES is False.
    """
    offs, mask = tile_offsets(R, C, BR, BC, G, NT)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)  # [G, BR, NT, BC]
    a_bits = block_amax_bits(x)  # [G, 1, NT, 1]
    finite = a_bits < 0x7F800000
    if NVFP4:
        amax = tl.load(amax_ptr).to(tl.float32, bitcast=True)
        dec, enc = nvfp4_scales(a_bits.to(tl.float32, bitcast=True), amax)
    else:
        dec, enc = e8m0_scales(a_bits, MX_MODE)
    y = tl.minimum(tl.maximum(x * enc, -6.0), 6.0)
    a = tl.abs(y)
    if SR:
        mag = e2m1_sr(a, random_bits(offs, key_ptr), SR_EXACT)
    else:
        mag = e2m1_rne(a)
    if NVFP4:
        neg = y < 0.0  # TE: -0.0 gets code +0
    else:
        neg = y.to(tl.int32, bitcast=True) < 0  # copysign: -0.0 keeps its sign bit
    if CODES:
        elems, blocks = storage_offsets(R, C, BR, BC, G, NT)
        if NVFP4:
            s_bits = tl.where(finite, fp8_bits(dec, 3, -6), 0x7F)
        else:
            s_bits = tl.where(finite, dec.to(tl.int32, bitcast=True) >> 23, 0xFF)  # 2^k: k+127
        tl.store(scale_ptr + blocks, s_bits.to(tl.uint8), mask=blocks >= 0)
        codes = tl.where(finite, e2m1_code(mag) | (neg.to(tl.int32) << 3), 0)
        store_packed(out_ptr, codes, elems, BR, BC, G, NT)
    else:
        # the sign is set on the bits: Triton's -v is 0 - v, which gives +0 for v = 0
        sign = neg.to(tl.int32) << 31
        q = (mag.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)
        tl.store(out_ptr + offs, tl.where(finite, q * dec, _NAN), mask=mask)


_KERNELS = {"amax": _amax_kernel, "local": _quantize_kernel, "codes": _quantize_kernel}


def _tiles(BR: int, BC: int, codes: bool) -> list[tuple[int, int, int]]:
    """(G, NT, num_warps) candidates: tiles of 1K-8K elements, 64-256 columns wide.

    Codes of blocks along R are stored along R (the transposed layout): a column of a tile
    stores G * BR / 2 contiguous bytes, 8 per NVFP4 block, so taller tiles (G of 4 to 8
    blocks) are candidates too, whose columns fill 32-byte sectors.
    """
    if _INTERPRET:  # one mid-sized tile: the interpreter's cost is per program and per op
        shapes = [(1024, 64, 4)]
    else:
        shapes = [(1024, 64, 4), (2048, 64, 4), (2048, 128, 4), (4096, 128, 8),
                  (4096, 256, 8), (8192, 256, 8)]
        if codes and BR > BC:
            shapes += [(4096, 64, 4), (8192, 64, 8)]
    out = []
    for elems, width, warps in shapes:
        nt = max(1, width // BC)
        g = max(1, elems // (BR * nt * BC))
        if (g, nt, warps) not in out:
            out.append((g, nt, warps))
    return out


@functools.cache
def _launcher(name: str, BR: int, BC: int):
    """The kernel for one block shape: autotuned on a GPU (keyed on R, C), fixed tile under
    the interpreter. Returns (callable kernel, constexprs the caller passes)."""
    kernel = _KERNELS[name]
    tiles = _tiles(BR, BC, name == "codes")
    if _INTERPRET:
        g, nt, _ = tiles[0]
        return kernel, {"G": g, "NT": nt}
    configs = [triton.Config({"G": g, "NT": nt}, num_warps=w) for g, nt, w in tiles]
    return triton.autotune(configs, key=["R", "C"])(kernel), {}


def _launch(name: str, P: int, R: int, C: int, BR: int, BC: int, *args, **constexprs):
    kernel, fixed = _launcher(name, BR, BC)

    def grid(meta):
        return (P * triton.cdiv(R, meta["G"] * BR) * triton.cdiv(C, meta["NT"] * BC),)

    kernel[grid](*args, R, C, BR=BR, BC=BC, **fixed, **constexprs, enable_fp_fusion=False)


def _view(shape: torch.Size, spec: QuantSpec) -> tuple[int, int, int, int, int]:
    """x's shape -> (P, R, C, BR, BC): x as [P, R, C], blocks of BR x BC (module docstring)."""
    layout = spec.layout
    size = layout.size
    if layout.kind == "2d":
        if len(shape) < 2:
            raise ValueError(f"2D tiles need at least 2 dims, got shape {tuple(shape)}")
        return math.prod(shape[:-2]), shape[-2], shape[-1], size, size
    if len(shape) == 0:
        raise ValueError("cannot block a 0-d tensor along an axis")
    a = layout.axis % len(shape)
    inner = math.prod(shape[a + 1:])
    if inner == 1:  # blocks along the contiguous dim: rows of length L
        return 1, math.prod(shape[:a]), shape[a], 1, size
    return math.prod(shape[:a]), shape[a], inner, size, 1


def stores(spec: QuantSpec) -> bool:
    """Whether ``fp4_storage`` computes ``spec``: ``supports`` with blocks of 2 or more
    elements (a byte holds two codes of one block; the reference pads 1-element blocks)."""
    return supports(spec) and spec.layout.size >= 2


def _run(x: torch.Tensor, spec: QuantSpec, key: torch.Tensor | None, codes: bool):
    """Both passes in one output mode. Returns (out, scales, amax): local fp32 [x.shape] and
    None, or packed codes and scale bytes (uint8, storage shapes); amax int32 [1] bits of A
    (None for MXFP4)."""
    if not (stores(spec) if codes else supports(spec)):
        raise ValueError(f"no FP4 kernel for {spec}")
    if (spec.rounding == "sr") != (key is not None):
        raise ValueError("pass an SR key exactly when spec.rounding == 'sr'")
    P, R, C, BR, BC = _view(x.shape, spec)
    if x.dtype not in _KERNEL_DTYPES:
        x = x.float()
    x = x.contiguous()
    scales = None
    if codes:
        elems, blocks = storage_shapes(x.shape, spec.layout)
        out = torch.empty(*elems[:-1], elems[-1] // 2, dtype=torch.uint8, device=x.device)
        scales = torch.empty(blocks, dtype=torch.uint8, device=x.device)
    else:
        out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    nvfp4 = spec.fmt == "nvfp4"
    amax = torch.zeros(1, dtype=torch.int32, device=x.device) if nvfp4 else None
    if x.numel():
        if nvfp4:
            _launch("amax", P, R, C, BR, BC, x, amax)
        _launch("codes" if codes else "local", P, R, C, BR, BC, x, out, scales, amax, key,
                NVFP4=nvfp4, MX_MODE=spec.mx_scale, SR=key is not None,
                SR_EXACT=spec.sr_mode == "exact", CODES=codes)
    return out, scales, amax


def fp4_operand(x: torch.Tensor, spec: QuantSpec,
                key: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """x [any shape], fp32/bf16/fp16 -> (local fp32 [x.shape], NVFP4 global decode scale fp32
    0-d or None), equal to ``fake_quantize_parts(x, spec, ...)`` bit for bit.

    key: int64 [2] SR key (``rng.key_tensor``) on x's device when ``spec.rounding == "sr"``,
    else None.
    """
    out, _, amax = _run(x, spec, key, codes=False)
    if amax is None:
        return out, None
    return out, global_decode_scale(amax.view(torch.float32).reshape(()))


def fp4_storage(x: torch.Tensor, spec: QuantSpec, key: torch.Tensor | None):
    """x [any shape], fp32/bf16/fp16 -> (data, scales, amax), the fields of
    ``formats.quantize(x, spec, ...)`` byte for byte (``stores(spec)`` must hold):

    data    uint8 packed codes, the storage layout with its last dim halved;
    scales  float8_e4m3fn (NVFP4) / float8_e8m0fnu (MXFP4), one per block, storage layout;
    amax    NVFP4's fp32 0-d tensor amax A, else None.

    key as for ``fp4_operand``. Element and scale bytes come from the registers of the same
    pass that would write ``local``; nothing else is written.
    """
    data, scales, amax = _run(x, spec, key, codes=True)
    if amax is None:
        return data, scales.view(torch.float8_e8m0fnu), None
    return data, scales.view(torch.float8_e4m3fn), amax.view(torch.float32).reshape(())
