"""Fused Triton quantization kernels for the ``triton`` backend of ``nvfp4_lab.quant``.

Two calls, each equal byte for byte to its reference in ``nvfp4_lab.formats``:

    operand(x, spec, seed=, stream=, signs=) -> (local, scale), ``fake_quantize_parts``'s
        local = fp32 element value x block decode scale in x's shape, scale = NVFP4's fp32
        0-d global decode scale A / 2688 (None for other formats): the emulated GEMM's input;
        the GEMM applies ``scale`` to its output.
    quantize(x, spec, seed=, stream=, signs=) -> QTensor, ``formats.quantize``'s storage
        form: packed E2M1 codes (uint8 [..., L_pad / 2]) or fp8 bytes, block scales
        (E4M3 / E8M0 bytes, fp32 for FP8) and NVFP4's amax, in the canonical layout (blocked
        axis last, padded to whole blocks).

Both run the same kernels, which read x once per pass; a constexpr picks the output, written
from the same registers: ``local``, or the codes and scale bytes (``_storage.py``):

    fp4.py   NVFP4 (TE scale order) and MXFP4 (ceil/floor/even E8M0), 1D blocks along any
             axis (the token axis of the Wgrad operands included), 2D 16x16 / 32x32 tiles;
             RNE and stochastic rounding (hw8 and exact) from the reference's counter-based
             hash, so SR outputs equal the reference's for the same seed
    fp8.py   E4M3 / E5M2 with per-block or per-tensor current scaling (the paper's baseline)
    rht.py   the random Hadamard transform as the reference's butterfly (same FP32 addition
             order, so the same bits); for now a pass of its own before the FP4 kernel

A spec no kernel covers (NVFP4 scale orders other than ``te``; an RHT along a middle axis of
a tensor of more than 2 dims) is computed by the reference: ``supported(spec)`` says which, and
the ``triton`` backend warns once for each spec it hands to the reference. ``quantize`` also
hands the reference empty tensors and FP4 blocks of one element (a byte holds two codes of a
block; the reference pads such blocks in pairs).
"""
from __future__ import annotations

import dataclasses
import functools

import torch

from nvfp4_lab.formats import QTensor, QuantSpec, Stream, fake_quantize_parts
from nvfp4_lab.formats import quantize as formats_quantize
from nvfp4_lab.formats.hadamard import check_divides
from nvfp4_lab.formats.quantize import runtime_inputs

from . import fp4, fp8
from .rht import rht_2d


@functools.cache  # per operand call on the hot path; a QuantSpec validates when built
def _without_rht(spec: QuantSpec) -> QuantSpec | None:
    """The FP4 spec left once its RHT is done by ``rht_2d``; None if no kernel covers it."""
    if spec.rht is None:
        return None
    plain = dataclasses.replace(spec, rht=None)
    return plain if fp4.supports(plain) else None


def supported(spec: QuantSpec) -> bool:
    """Whether fused kernels compute ``spec`` (else ``operand`` and ``quantize`` use the
    reference)."""
    return fp4.supports(spec) or fp8.supports(spec) or _without_rht(spec) is not None


def _rotate(x: torch.Tensor, spec: QuantSpec, signs: torch.Tensor) -> torch.Tensor | None:
    """The RHT kernel: x [..., L] along the last axis, or x [R, C] along dim 0, fp32 or bf16
    -> the rotated tensor (x's shape and dtype). None for other shapes and dtypes."""
    if x.dtype not in (torch.float32, torch.bfloat16):
        return None
    axis = spec.layout.axis % x.dim()
    if axis == x.dim() - 1:
        flat, along = x.reshape(-1, x.shape[-1]), 1           # [rows, L], along L
    elif x.dim() == 2:
        flat, along = x, 0                                    # [R, C], along R
    else:
        return None
    check_divides(spec.rht.size, x.shape[axis], axis)
    return rht_2d(flat, signs, along).view(x.shape)


def operand(x: torch.Tensor, spec: QuantSpec, *, seed: int = 0, stream: Stream | None = None,
            signs: torch.Tensor | None = None):
    """x [any shape], fp32/bf16 -> (local fp32 [x.shape], global decode scale or None)."""
    if fp4.supports(spec):
        key, _ = runtime_inputs(x, spec, seed, stream, signs)
        return fp4.fp4_operand(x, spec, key)
    if fp8.supports(spec):
        return fp8.fp8_operand(x, spec), None
    plain = _without_rht(spec)
    if plain is not None:
        key, rht_signs = runtime_inputs(x, spec, seed, stream, signs)
        rotated = _rotate(x, spec, rht_signs)
        if rotated is not None:
            return fp4.fp4_operand(rotated, plain, key)
    return fake_quantize_parts(x, spec, seed=seed, stream=stream, signs=signs)


def _storage(x: torch.Tensor, spec: QuantSpec, key: torch.Tensor | None,
             signs: torch.Tensor | None):
    """(data, scales, amax) from the kernels, or None where the reference computes them.
    key, signs: the SR key and RHT signs of ``runtime_inputs``."""
    if x.numel() == 0:  # nothing to launch (and NVFP4's reference raises on it)
        return None
    if fp4.stores(spec):
        return fp4.fp4_storage(x, spec, key)
    if fp8.supports(spec):
        out = fp8.fp8_storage(x, spec)
        return None if out is None else (*out, None)
    plain = _without_rht(spec)
    if plain is not None and fp4.stores(plain):
        rotated = _rotate(x, spec, signs)
        if rotated is not None:
            return fp4.fp4_storage(rotated, plain, key)
    return None


def quantize(x: torch.Tensor, spec: QuantSpec, *, seed: int = 0, stream: Stream | None = None,
             signs: torch.Tensor | None = None) -> QTensor:
    """x [any shape], fp32/bf16/fp16 -> its storage form, equal to ``formats.quantize(x, spec,
    seed=, stream=, signs=)`` field by field: packed codes or fp8 bytes, scale bytes and NVFP4's
    amax in the canonical layout (``QTensor``); the same shape, spec and RHT signs. What no
    kernel computes (``supported``; an RHT of fp16 input; empty x) is the reference's."""
    key, rht_signs = runtime_inputs(x, spec, seed, stream, signs)
    parts = _storage(x, spec, key, rht_signs)
    if parts is None:
        return formats_quantize(x, spec, seed=seed, stream=stream, signs=signs)
    return QTensor(spec, *parts, x.shape, rht_signs)
