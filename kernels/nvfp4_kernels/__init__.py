"""Fused Triton quantization kernels for the ``triton`` backend of ``nvfp4_lab.quant``.

Three calls, each equal byte for byte to its reference in ``nvfp4_lab.formats``:

    operand(x, spec, seed=, stream=, signs=) -> (local, amax), ``fake_quantize_parts``'s
        local = fp32 element value x block decode scale in x's shape, amax = NVFP4's fp32
        0-d tensor amax (None for other formats): the emulated GEMM's input;
        the GEMM scales its output by ``gemm_alpha`` of the amaxes.
    quantize(x, spec, seed=, stream=, signs=) -> QTensor, ``formats.quantize``'s storage
        form: packed E2M1 codes (uint8 [..., L_pad / 2]) or fp8 bytes, block scales
        (E4M3 / E8M0 bytes, fp32 for FP8) and NVFP4's amax, in the canonical layout (blocked
        axis last, padded to whole blocks).
    operand_and_quantize(x, spec, ...) -> (local, scale, QTensor): both from one pass that
        writes the two outputs from the same registers.

and one for the emulated GEMM's output (``nvfp4_lab.quant.gemm``):

    epilogue.gemm_epilogue(y, amaxes, divisor, round_to, dtype): NVFP4's alpha, the rounding
        to the compute dtype and the store in one launch, equal to the reference's torch ops.

The quantizers run the same kernels, which read x once per pass; constexprs pick the outputs:

    fp4.py   NVFP4 (TE scale order) and MXFP4 (ceil/floor/even E8M0), 1D blocks along any
             axis (the token axis of the Wgrad operands included), 2D 16x16 / 32x32 tiles;
             the random Hadamard transform fused into the tile loader (rht.py: the
             reference's butterfly, so the same bits); RNE and stochastic rounding (hw8 and
             exact) from the reference's counter-based hash, so SR outputs equal the
             reference's for the same seed
    fp8.py   E4M3 / E5M2 with per-block or per-tensor current scaling (the paper's baseline)

A spec no kernel covers (NVFP4 scale orders other than ``te``; FP4 blocks over 256 elements or
2D tiles over 64) is computed by the reference: ``supported(spec)`` says which, and the
``triton`` backend warns once for each spec it hands to the reference. ``quantize`` also hands
the reference empty tensors and FP4 blocks of one element (a byte holds two codes of a block;
the reference pads such blocks in pairs), and FP8 layouts its kernels do not store.
"""
from __future__ import annotations

import torch

from nvfp4_lab.formats import QTensor, QuantSpec, Stream, fake_quantize_parts, quantizer
from nvfp4_lab.formats import quantize as formats_quantize
from nvfp4_lab.formats.quantizer import check_local_dtype
from nvfp4_lab.formats.rng import stream_key

from . import fp4, fp8


def supported(spec: QuantSpec) -> bool:
    """Whether fused kernels compute ``spec`` (else the calls use the reference)."""
    return fp4.supports(spec) or fp8.supports(spec)


def runtime_inputs(x: torch.Tensor, spec: QuantSpec, seed: int, stream: Stream | None,
                   signs: torch.Tensor | None):
    """What varies per call: the SR key (k0, k1) on the host, passed with the launch
    (``fp4.sr_key_args``), and the RHT signs on x's device."""
    stream = stream or Stream()
    key = stream_key(seed, *stream.ids()) if spec.rounding == "sr" else None
    return key, quantizer.rht_signs(x, spec, stream, signs)


def operand(x: torch.Tensor, spec: QuantSpec, *, seed: int = 0, stream: Stream | None = None,
            signs: torch.Tensor | None = None, local_dtype: torch.dtype = torch.float32):
    """x [any shape], fp32/bf16/fp16 -> (local [x.shape], NVFP4 amax or None).

    local_dtype: fp32 (``fake_quantize_parts``'s), or bf16 for FP4 specs, whose locals it
    holds exactly: the FP4 kernels then write bf16 (half the bytes), otherwise fp32 is cast.
    """
    check_local_dtype(spec, local_dtype)
    if fp4.supports(spec):
        key, rht_signs = runtime_inputs(x, spec, seed, stream, signs)
        return fp4.fp4_operand(x, spec, key, rht_signs, local_dtype)
    if fp8.supports(spec):
        return fp8.fp8_operand(x, spec), None
    local, scale = fake_quantize_parts(x, spec, seed=seed, stream=stream, signs=signs)
    return local.to(local_dtype), scale


def _storage(x: torch.Tensor, spec: QuantSpec, key: torch.Tensor | None,
             signs: torch.Tensor | None):
    """(data, scales, amax) from the kernels, or None where the reference computes them.
    key, signs: the SR key and RHT signs of ``runtime_inputs``."""
    if x.numel() == 0:  # nothing to launch (and NVFP4's reference raises on it)
        return None
    if fp4.stores(spec):
        return fp4.fp4_storage(x, spec, key, signs)
    if fp8.supports(spec):
        out = fp8.fp8_storage(x, spec)
        return None if out is None else (*out, None)
    return None


def quantize(x: torch.Tensor, spec: QuantSpec, *, seed: int = 0, stream: Stream | None = None,
             signs: torch.Tensor | None = None) -> QTensor:
    """x [any shape], fp32/bf16/fp16 -> its storage form, equal to ``formats.quantize(x, spec,
    seed=, stream=, signs=)`` field by field: packed codes or fp8 bytes, scale bytes and NVFP4's
    amax in the canonical layout (``QTensor``); the same shape, spec and RHT signs. What no
    kernel computes (``supported``, empty x) is the reference's."""
    key, rht_signs = runtime_inputs(x, spec, seed, stream, signs)
    parts = _storage(x, spec, key, rht_signs)
    if parts is None:
        return formats_quantize(x, spec, seed=seed, stream=stream, signs=signs)
    return QTensor(spec, *parts, x.shape, rht_signs)


def operand_and_quantize(x: torch.Tensor, spec: QuantSpec, *, seed: int = 0,
                         stream: Stream | None = None, signs: torch.Tensor | None = None):
    """x [any shape] -> (local, amax, QTensor): ``operand``'s and ``quantize``'s results.

    For FP4 specs with a storage kernel one pass-2 launch writes ``local`` and the codes from
    the same registers (NVFP4: after one amax pass), instead of two full quantizations;
    otherwise the two calls run one after the other.
    """
    if not fp4.stores(spec) or x.numel() == 0:
        return (*operand(x, spec, seed=seed, stream=stream, signs=signs),
                quantize(x, spec, seed=seed, stream=stream, signs=signs))
    key, rht_signs = runtime_inputs(x, spec, seed, stream, signs)
    out = fp4.fp4_quantize(x, spec, key, rht_signs, local=True, codes=True)
    return (out.local, out.amax,
            QTensor(spec, out.data, out.scales, out.amax, x.shape, rht_signs))
