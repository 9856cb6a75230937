"""Fused NVFP4 / MXFP4 quantization kernels: ``fp4_quantize(x, spec, key, signs)``.

What is computed
----------------
``fp4_quantize`` writes, on request, what ``nvfp4_lab.formats.fake_quantize_parts(x, spec)``
returns, bit for bit: ``local`` (fp32, x's shape) = E2M1 element value x fp32 block decode
scale, with NVFP4's fp32 0-d tensor amax (None for MXFP4); and the fields of
``formats.quantize(x, spec)``'s QTensor: packed E2M1 codes, E4M3 / E8M0 scale bytes (storage
layout of ``_storage``) and NVFP4's amax A. One kernel writes either or both from the same
registers (constexprs ``LOCAL`` and ``CODES``); ``fp4_operand`` and ``fp4_storage`` are the two
single-output calls. Covered: NVFP4 with TE's scale order ("te"), also with 4/6 block-scale
selection (``four_over_six.py``), and MXFP4 with ceil / floor / even E8M0 exponents; 1D blocks
along any axis and 2D tiles over the last two dims; the random Hadamard transform along the
block axis, fused into the tile loader (``rht.py``), so the amax is the rotated tensor's and
the rotated tensor never reaches memory; RNE or stochastic rounding (hw8 and exact) with the
reference's counter-based bits; fp32 / bf16 / fp16 input (other dtypes are cast with
``.float()`` on the host, as the reference does).

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
  loads A from the device, and writes its outputs. With an RHT both passes rotate the tile
  they load (``rht.py``): the butterfly is recomputed rather than the rotated tensor stored
  and re-read. No host synchronisation: A stays on the
  device, and the GEMM derives its alpha from it with the reference's own torch ops
  (``formats.nvfp4.gemm_alpha``), so it equals the reference on each device.
* MXFP4: one pass (no tensor amax).
* Pass 2 writes 4 bytes an element (``local``) and / or, with ``CODES``, half a byte an
  element and one a block (packed codes, scale bytes): 9/16 of a byte an element for NVFP4
  1x16. Codes are
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
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from nvfp4_lab.formats import QuantSpec
from nvfp4_lab.formats.hadamard import check_divides
from nvfp4_lab.formats.rng import as_int32

from ._bits import (
    block_amax_bits,
    e2m1_code,
    e2m1_rne,
    e2m1_sr,
    e8m0_scales,
    fp8_bits,
    nvfp4_scales,
    random_bits,
    tile_coords,
    tile_offsets,
)
from ._storage import storage_offsets, storage_shapes, store_packed
from .four_over_six import four_over_six_select
from .rht import norm as rht_norm
from .rht import rotate_tile, round_mode

_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
# NVFP4_KERNELS_AUTOTUNE=0: the first tile candidate only, one compile per kernel variant (the
# GPU tests: results do not depend on the tile, and autotuning compiles every candidate)
_AUTOTUNE = os.environ.get("NVFP4_KERNELS_AUTOTUNE", "1") != "0"
_KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# Largest block sizes with a kernel: a 2D tile of size^2 elements must fit in registers.
_MAX_SIZE = {"1d": 256, "2d": 64}


def supports(spec: QuantSpec) -> bool:
    """Whether ``fp4_operand`` computes ``spec``: NVFP4 ("te" order, one amax per tensor, the
    standard scale or 4/6; row-scaled and MS-EDEN have no kernel yet) or MXFP4, 1D blocks
    along any axis (with or without an RHT) or 2D tiles. RNE or SR, any E8M0 mode."""
    if spec.fmt not in ("nvfp4", "mxfp4") or spec.rounding == "ms_eden":
        return False
    if spec.fmt == "nvfp4" and (spec.order != "te" or spec.amax != "tensor"):
        return False
    layout = spec.layout
    return layout.kind in _MAX_SIZE and layout.size <= _MAX_SIZE[layout.kind]


@triton.jit
def _load(x_ptr, signs_ptr, norm, R, C, BR: tl.constexpr, BC: tl.constexpr, G: tl.constexpr,
          NT: tl.constexpr, RHT_LOG: tl.constexpr, RHT_ALONG_R: tl.constexpr,
          RHT_ROUND: tl.constexpr):
    """This program's tile of x as fp32 [G, BR, NT, BC], RHT-rotated when RHT_LOG > 0
    (``rht.rotate_tile``), with its offsets (the SR counters) and mask (``tile_offsets``)."""
    offs, mask = tile_offsets(R, C, BR, BC, G, NT)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)  # [G, BR, NT, BC]
    if RHT_LOG > 0:
        _, _, _, r, c = tile_coords(R, C, BR, BC, G, NT)
        x = rotate_tile(x, signs_ptr, norm, r, c, BR, BC, G, NT, RHT_LOG, RHT_ALONG_R,
                        RHT_ROUND)
    return x, offs, mask


@triton.jit
def _amax_kernel(x_ptr, amax_ptr, signs_ptr, norm, R, C, BR: tl.constexpr, BC: tl.constexpr,
                 G: tl.constexpr, NT: tl.constexpr, RHT_LOG: tl.constexpr,
                 RHT_ALONG_R: tl.constexpr, RHT_ROUND: tl.constexpr):
    """Pass 1 (NVFP4): amax_ptr (int32 [1], zeroed) <- max over this tile's finite blocks of
    the block amax bits (after the RHT, if any)."""
    x, _, _ = _load(x_ptr, signs_ptr, norm, R, C, BR, BC, G, NT, RHT_LOG, RHT_ALONG_R,
                    RHT_ROUND)
    a_bits = block_amax_bits(x)  # [G, 1, NT, 1]
    tl.atomic_max(amax_ptr, tl.max(tl.where(a_bits < 0x7F800000, a_bits, 0)))


@triton.jit(do_not_specialize=["k0", "k1"])
def _quantize_kernel(x_ptr, local_ptr, codes_ptr, scale_ptr, amax_ptr, k0, k1, signs_ptr,
                     norm, R, C, BR: tl.constexpr, BC: tl.constexpr, G: tl.constexpr,
                     NT: tl.constexpr, RHT_LOG: tl.constexpr, RHT_ALONG_R: tl.constexpr,
                     RHT_ROUND: tl.constexpr, NVFP4: tl.constexpr, MX_MODE: tl.constexpr,
                     SR: tl.constexpr, SR_EXACT: tl.constexpr, LOCAL: tl.constexpr,
                     LOCAL_BF16: tl.constexpr, CODES: tl.constexpr, FOUR6: tl.constexpr,
                     FOUR6_MSE: tl.constexpr, LIMIT: tl.constexpr):
    """Pass 2: E2M1(x * enc_b) and dec_b for this tile (``nvfp4.quantize_blocks`` /
    ``mxfp4.quantize_blocks``), x rotated first when RHT_LOG > 0, then written as

    LOCAL  local_ptr: fp32 [x.shape] <- E2M1 value * dec_b (``decode_local``), or bf16 with
           LOCAL_BF16: the value has at most 6 significant bits and an fp32 exponent, so its
           top 16 bits are the bf16 value (no rounding happens);
    CODES  codes_ptr: uint8 packed codes, scale_ptr: uint8 scale bytes, both in the
           storage layout (``_storage``); a non-finite block gets codes 0 and the NaN
           scale byte (E4M3 0x7F, E8M0 0xFF), as ``e2m1.to_codes`` gives its NaNs;

    either or both, from the same registers. amax_ptr: int32 [1] bits of A (NVFP4; None for
    MXFP4); k0, k1: the SR key as int32 scalars (``sr_key_args``: kernel arguments, so no
    copy to the device; 0 for RNE); signs_ptr: fp32 [2^RHT_LOG] RHT signs
    and norm fp32(1/sqrt(d)) (None and 0 without RHT); unused pointers are None. FOUR6:
    NVFP4 with 4/6 block-scale selection (``four_over_six.py``; FOUR6_MSE: its error metric,
    LIMIT: the global E4M3 limit L), RNE.
    """
    x, offs, mask = _load(x_ptr, signs_ptr, norm, R, C, BR, BC, G, NT, RHT_LOG, RHT_ALONG_R,
                          RHT_ROUND)
    a_bits = block_amax_bits(x)  # [G, 1, NT, 1]
    finite = a_bits < 0x7F800000
    if FOUR6:
        amax = tl.load(amax_ptr).to(tl.float32, bitcast=True)
        dec, y, mag = four_over_six_select(x, a_bits.to(tl.float32, bitcast=True), amax,
                                           LIMIT, FOUR6_MSE, BR, BC, G, NT)
    else:
        if NVFP4:
            amax = tl.load(amax_ptr).to(tl.float32, bitcast=True)
            dec, enc = nvfp4_scales(a_bits.to(tl.float32, bitcast=True), amax)
        else:
            dec, enc = e8m0_scales(a_bits, MX_MODE)
        y = tl.minimum(tl.maximum(x * enc, -6.0), 6.0)
        a = tl.abs(y)
        if SR:
            mag = e2m1_sr(a, random_bits(offs, k0, k1), SR_EXACT)
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
        store_packed(codes_ptr, codes, elems, BR, BC, G, NT)
    if LOCAL:
        # the sign is set on the bits: Triton's -v is 0 - v, which gives +0 for v = 0
        sign = neg.to(tl.int32) << 31
        q = (mag.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)
        local = tl.where(finite, q * dec, float("nan"))  # not a global: NaN fails the launch check
        if LOCAL_BF16:  # the top half of the bits (the interpreter's cast flushes subnormals)
            local = (local.to(tl.uint32, bitcast=True) >> 16).to(tl.uint16)
            local = local.to(tl.bfloat16, bitcast=True)
        tl.store(local_ptr + offs, local, mask=mask)


def _tiles(BR: int, BC: int, codes: bool, rht_r: int, rht_c: int) -> list[tuple[int, int, int]]:
    """(G, NT, num_warps) candidates: tiles of 1K-8K elements, 64-256 columns wide.

    Codes of blocks along R are stored along R (the transposed layout): a column of a tile
    stores G * BR / 2 contiguous bytes, 8 per NVFP4 block, so taller tiles (G of 4 to 8
    blocks) are candidates too, whose columns fill 32-byte sectors. rht_r / rht_c: the RHT
    size when the transform runs along R / C, else 1: the tile's extent along that axis must
    hold whole chunks (``rht.rotate_tile``), so it is at least the size (both powers of two).
    """
    if _INTERPRET:  # one mid-sized tile: the interpreter's cost is per program and per op
        shapes = [(1024, 64, 8)]
    else:
        # 1K and tall 4K tiles with 8 warps: with 4, the 4/6 and fused-RHT kernels spill
        # registers under Triton 3.7 (kernels/README.md, Triton versions)
        shapes = [(1024, 64, 8), (2048, 64, 4), (2048, 128, 4), (4096, 128, 8),
                  (4096, 256, 8), (8192, 256, 8)]
        if codes and BR > BC:
            shapes += [(4096, 64, 8), (8192, 64, 8)]
    out = []
    for elems, width, warps in shapes:
        nt = max(1, width // BC, rht_c // BC)
        g = max(1, elems // (BR * nt * BC), rht_r // BR)
        nt = max(1, min(nt, elems // (g * BR * BC)))  # a tall RHT tile: fewer columns
        if (g, nt, warps) not in out:
            out.append((g, nt, warps))
    return out


@functools.cache
def _launcher(name: str, BR: int, BC: int, codes: bool, rht_r: int, rht_c: int):
    """The kernel ("amax" or "quantize") for one block shape and RHT: autotuned on a GPU
    (keyed on R, C), fixed tile under the interpreter or with autotuning off. Returns
    (callable kernel, constexprs and options the caller passes)."""
    kernel = _amax_kernel if name == "amax" else _quantize_kernel
    tiles = _tiles(BR, BC, codes, rht_r, rht_c)
    if _INTERPRET or not _AUTOTUNE:
        g, nt, warps = tiles[0]
        return kernel, {"G": g, "NT": nt, **({} if _INTERPRET else {"num_warps": warps})}
    configs = [triton.Config({"G": g, "NT": nt}, num_warps=w) for g, nt, w in tiles]
    return triton.autotune(configs, key=["R", "C"])(kernel), {}


def _view(shape: torch.Size, spec: QuantSpec) -> tuple[int, int, int, int, int, bool]:
    """x's shape -> (P, R, C, BR, BC, along_r): x as [P, R, C], blocks of BR x BC (module
    docstring); along_r: 1D blocks run along R (blocks of one element are ambiguous)."""
    layout = spec.layout
    size = layout.size
    if layout.kind == "2d":
        if len(shape) < 2:
            raise ValueError(f"2D tiles need at least 2 dims, got shape {tuple(shape)}")
        return math.prod(shape[:-2]), shape[-2], shape[-1], size, size, False
    if len(shape) == 0:
        raise ValueError("cannot block a 0-d tensor along an axis")
    a = layout.axis % len(shape)
    inner = math.prod(shape[a + 1:])
    if inner == 1:  # blocks along the contiguous dim: rows of length L
        return 1, math.prod(shape[:a]), shape[a], 1, size, False
    return math.prod(shape[:a]), shape[a], inner, size, 1, True


def stores(spec: QuantSpec) -> bool:
    """Whether ``fp4_storage`` computes ``spec``: ``supports`` with blocks of 2 or more
    elements (a byte holds two codes of a block; the reference pads 1-element blocks)."""
    return supports(spec) and spec.layout.size >= 2


class FP4Out(NamedTuple):
    """What ``fp4_quantize`` wrote: ``local`` fp32 [x.shape] (or None), ``data`` packed codes
    and ``scales`` E4M3 / E8M0 bytes in the storage layout (or None), NVFP4's amax (fp32 0-d,
    else None)."""

    local: torch.Tensor | None
    data: torch.Tensor | None
    scales: torch.Tensor | None
    amax: torch.Tensor | None


def _rht_args(x: torch.Tensor, spec: QuantSpec, signs: torch.Tensor | None, along_r: bool):
    """The RHT's kernel arguments: (signs_ptr, norm), constexprs, and (rht_r, rht_c)."""
    if spec.rht is None:
        return (None, 0.0), dict(RHT_LOG=0, RHT_ALONG_R=False, RHT_ROUND=0), (1, 1)
    d = spec.rht.size
    if signs is None or signs.numel() != d:
        raise ValueError(f"an RHT of size {d} needs its {d} signs (``runtime_inputs``)")
    check_divides(d, x.shape[spec.layout.axis], spec.layout.axis)  # the reference's rule
    consts = dict(RHT_LOG=d.bit_length() - 1, RHT_ALONG_R=along_r, RHT_ROUND=round_mode(x.dtype))
    signs = signs.to(device=x.device, dtype=torch.float32).contiguous()
    return (signs, rht_norm(d)), consts, ((d, 1) if along_r else (1, d))


def fp4_quantize(x: torch.Tensor, spec: QuantSpec, key: tuple[int, int] | None,
                 signs: torch.Tensor | None = None, *, local: bool = True,
                 codes: bool = False, local_dtype: torch.dtype = torch.float32) -> FP4Out:
    """x [any shape], fp32/bf16/fp16 (other dtypes cast to fp32, as the reference does) ->
    ``FP4Out`` with ``local`` and / or the storage form, from one pass-2 kernel (NVFP4: after
    the amax pass). Equal bit for bit to ``fake_quantize_parts`` (local, amax) and
    ``formats.quantize`` (data, scales, amax) with the same SR key and RHT signs.

    key: the SR key (k0, k1) on the host (``rng.stream_key``) when ``spec.rounding == "sr"``,
    else None; signs: fp32 [d] RHT signs when ``spec.rht`` is set (``runtime_inputs``).
    ``codes`` needs ``stores(spec)``, ``local`` needs ``supports(spec)``. ``local_dtype``:
    fp32 (the reference's), or bf16, which holds every FP4 local exactly (half the bytes; the
    GEMM's BF16 inputs).
    """
    if local_dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"local_dtype must be float32 or bfloat16, not {local_dtype}")
    if not (local or codes) or not (stores(spec) if codes else supports(spec)):
        raise ValueError(f"no FP4 kernel for {spec} (local={local}, codes={codes})")
    if (spec.rounding == "sr") != (key is not None):
        raise ValueError("pass an SR key exactly when spec.rounding == 'sr'")
    P, R, C, BR, BC, along_r = _view(x.shape, spec)
    rht_ptrs, rht, (rht_r, rht_c) = _rht_args(x, spec, signs, along_r)
    if x.dtype not in _KERNEL_DTYPES:
        x = x.float()
    x = x.contiguous()
    out_local = torch.empty(x.shape, dtype=local_dtype, device=x.device) if local else None
    data = scales = None
    if codes:
        elems, blocks = storage_shapes(x.shape, spec.layout)
        data = torch.empty(*elems[:-1], elems[-1] // 2, dtype=torch.uint8, device=x.device)
        scales = torch.empty(blocks, dtype=torch.uint8, device=x.device)
    nvfp4 = spec.fmt == "nvfp4"
    amax = torch.zeros(1, dtype=torch.int32, device=x.device) if nvfp4 else None
    if x.numel():
        if nvfp4:
            _launch("amax", P, R, C, BR, BC, codes, rht_r, rht_c, x, amax, *rht_ptrs, **rht)
        _launch("quantize", P, R, C, BR, BC, codes, rht_r, rht_c, x, out_local, data, scales,
                amax, *sr_key_args(key), *rht_ptrs, **rht, NVFP4=nvfp4, MX_MODE=spec.mx_scale,
                SR=key is not None,
                SR_EXACT=spec.sr_mode == "exact", LOCAL=local,
                LOCAL_BF16=local_dtype == torch.bfloat16, CODES=codes,
                FOUR6=bool(spec.four_over_six), FOUR6_MSE=spec.four_over_six == "mse",
                LIMIT=spec.e4m3_limit)
    if scales is not None:
        scales = scales.view(torch.float8_e4m3fn if nvfp4 else torch.float8_e8m0fnu)
    amax = None if amax is None else amax.view(torch.float32).reshape(())
    return FP4Out(out_local, data, scales, amax)


def sr_key_args(key: tuple[int, int] | None) -> tuple[int, int]:
    """The SR key (k0, k1), uint32 each, as the int32s with the same bits: scalar kernel
    arguments of one type whatever the key (one compiled kernel), passed with the launch
    instead of copied to the device. (0, 0) without SR."""
    return tuple(as_int32(k) for k in key or (0, 0))


def _launch(name: str, P: int, R: int, C: int, BR: int, BC: int, codes: bool, rht_r: int,
            rht_c: int, *args, **constexprs):
    """Launch kernel ``name`` on x viewed as [P, R, C]: args are its pointer and scalar
    arguments up to ``norm``; R and C follow them."""
    kernel, fixed = _launcher(name, BR, BC, codes, rht_r, rht_c)

    def grid(meta):
        return (P * triton.cdiv(R, meta["G"] * BR) * triton.cdiv(C, meta["NT"] * BC),)

    kernel[grid](*args, R, C, BR=BR, BC=BC, **fixed, **constexprs, enable_fp_fusion=False)


def fp4_operand(x: torch.Tensor, spec: QuantSpec, key: tuple[int, int] | None,
                signs: torch.Tensor | None = None, local_dtype: torch.dtype = torch.float32
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """x [any shape] -> (local [x.shape] in local_dtype, NVFP4 tensor amax fp32 0-d
    or None), equal to ``fake_quantize_parts(x, spec, ...)`` bit for bit (``fp4_quantize``)."""
    out = fp4_quantize(x, spec, key, signs, local_dtype=local_dtype)
    return out.local, out.amax


def fp4_storage(x: torch.Tensor, spec: QuantSpec, key: tuple[int, int] | None,
                signs: torch.Tensor | None = None):
    """x [any shape] -> (data, scales, amax), the fields of ``formats.quantize(x, spec, ...)``
    byte for byte (``stores(spec)`` must hold): uint8 packed codes (storage layout, last dim
    halved), float8_e4m3fn / float8_e8m0fnu block scales, NVFP4's fp32 0-d amax or None.
    Only the codes and scales are written (``fp4_quantize``)."""
    out = fp4_quantize(x, spec, key, signs, local=False, codes=True)
    return out.data, out.scales, out.amax
