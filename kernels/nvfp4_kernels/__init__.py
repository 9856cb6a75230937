"""Fused Triton quantization kernels for the ``triton`` backend of ``nvfp4_lab.quant``.

One call, ``operand(x, spec, seed=, stream=, signs=)``, returns what
``nvfp4_lab.formats.fake_quantize_parts`` returns, byte for byte: ``(local, scale)`` with
local = fp32 element value x block decode scale in x's shape, scale = NVFP4's fp32 0-d global
decode scale A / 2688 (None for other formats). The GEMM applies ``scale`` to its output.

Each kernel reads x once per pass and writes ``local`` directly (the emulated GEMM's input):

    fp4.py   NVFP4 (TE scale order) and MXFP4 (ceil/floor/even E8M0), 1D blocks along any
             axis (the token axis of the Wgrad operands included), 2D 16x16 / 32x32 tiles;
             RNE and stochastic rounding (hw8 and exact) from the reference's counter-based
             hash, so SR outputs equal the reference's for the same seed
    fp8.py   E4M3 / E5M2 with per-block or per-tensor current scaling (the paper's baseline)
    rht.py   the random Hadamard transform as the reference's butterfly (same FP32 addition
             order, so the same bits); for now a pass of its own before the FP4 kernel

A spec no kernel covers (NVFP4 scale orders other than ``te``; an RHT along a middle axis of
a tensor of more than 2 dims) is computed by the reference: ``supported(spec)`` says which, and
the ``triton`` backend warns once for each spec it hands to the reference.
"""
from __future__ import annotations

import dataclasses

import torch

from nvfp4_lab.formats import QuantSpec, Stream, fake_quantize_parts
from nvfp4_lab.formats.hadamard import check_divides
from nvfp4_lab.formats.quantize import runtime_inputs

from . import fp4, fp8
from .rht import rht_2d


def _without_rht(spec: QuantSpec) -> QuantSpec | None:
    """The FP4 spec left once its RHT is done by ``rht_2d``; None if no kernel covers it."""
    if spec.rht is None:
        return None
    plain = dataclasses.replace(spec, rht=None)
    return plain if fp4.supports(plain) else None


def supported(spec: QuantSpec) -> bool:
    """Whether fused kernels compute ``spec`` (else ``operand`` uses the reference)."""
    return fp4.supports(spec) or fp8.supports(spec) or _without_rht(spec) is not None


def _rht_operand(x: torch.Tensor, spec: QuantSpec, plain: QuantSpec, seed, stream, signs):
    """RHT kernel, then the FP4 kernel on its output: x [..., L] along the last axis, or
    x [R, C] along dim 0. None for other shapes."""
    axis = spec.layout.axis % x.dim()
    if axis == x.dim() - 1:
        flat, along = x.reshape(-1, x.shape[-1]), 1           # [rows, L], along L
    elif x.dim() == 2:
        flat, along = x, 0                                    # [R, C], along R
    else:
        return None
    check_divides(spec.rht.size, x.shape[axis], axis)
    key, signs = runtime_inputs(x, spec, seed, stream, signs)
    rotated = rht_2d(flat, signs, along).view(x.shape)
    return fp4.fp4_operand(rotated, plain, key)


def operand(x: torch.Tensor, spec: QuantSpec, *, seed: int = 0, stream: Stream | None = None,
            signs: torch.Tensor | None = None):
    """x [any shape], fp32/bf16 -> (local fp32 [x.shape], global decode scale or None)."""
    if fp4.supports(spec):
        key, _ = runtime_inputs(x, spec, seed, stream, signs)
        return fp4.fp4_operand(x, spec, key)
    if fp8.supports(spec):
        return fp8.fp8_operand(x, spec), None
    plain = _without_rht(spec)
    if plain is not None and x.dtype in (torch.float32, torch.bfloat16):
        out = _rht_operand(x, spec, plain, seed, stream, signs)
        if out is not None:
            return out
    return fake_quantize_parts(x, spec, seed=seed, stream=stream, signs=signs)
