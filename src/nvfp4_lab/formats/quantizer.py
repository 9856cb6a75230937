"""``quantize`` (-> QTensor) and ``fake_quantize`` (-> x's dtype): the eager reference.

Both run one pipeline, so a QTensor decodes to exactly what fake_quantize returns:

    x [any shape]
      -> zero-padded to whole blocks                                  blocks.py
      -> random Hadamard transform, rounded to x's dtype (optional)   hadamard.py
      -> blocked view in fp32 (blocks split in place, no transpose)
      -> scales and element rounding per format       nvfp4.py (four_over_six.py) /
                                                      mxfp4.py / fp8.py / e2m1.py
      -> element values in the blocked view
    quantize:      values -> storage layout, packed codes / fp8 bytes, scales, amax (QTensor)
    fake_quantize: values * scales -> original shape, x's dtype

Stochastic rounding draws its bits from (seed, stream ids, element index), where the index
is the element's row-major position in x as passed (rng.py): the same element gets the same
bits whatever the layout, backend or machine.

The seed and stream ids enter as tensors, so a compiled copy of a pipeline
(``quant/compiled.py``, the compiled backend) does not recompile per step.
"""
from __future__ import annotations

import functools

import torch

from . import e2m1, four_over_six, fp8, ms_eden, mxfp4, nvfp4
from .blocks import canonical, from_blocks, pad, store_scales, to_blocks
from .hadamard import check_divides, rht_dim, sign_vector
from .qtensor import QTensor, decode_local, dequantize_blocks, store_amax
from .rng import key_tensor, random_bits, to_device
from .spec import FP4_FORMATS, QuantSpec, Stream


def make_spec(fmt: str | QuantSpec = "nvfp4", **kwargs) -> QuantSpec:
    """A QuantSpec from a format name and keyword fields, or a spec passed through."""
    if isinstance(fmt, QuantSpec):
        if kwargs:
            raise TypeError("pass either a QuantSpec or keyword fields, not both")
        return fmt
    return QuantSpec(fmt=fmt, **kwargs)


def _blocked_index(spec: QuantSpec, x: torch.Tensor, multiple: int):
    """The row-major index of each element of x, in the blocked view (padding: index 0).
    int32 while it fits: the hash works on int32 and takes indices modulo 2^32 (``rng``), so
    an int64 index would only be converted, element by element."""
    dtype = torch.int32 if x.numel() <= torch.iinfo(torch.int32).max else torch.int64
    index = torch.arange(x.numel(), dtype=dtype, device=x.device).view(x.shape)
    return to_blocks(pad(index, spec.layout, multiple), spec.layout)


def _rounder(spec: QuantSpec, x: torch.Tensor, key: torch.Tensor | None, multiple: int):
    """The E2M1 magnitude rounding for spec, with SR bits laid out like the blocked view."""
    if spec.rounding == "rne":
        return e2m1.round_rne
    bits = random_bits(_blocked_index(spec, x, multiple)[0], key)
    sr = e2m1.round_sr_hw8 if spec.sr_mode == "hw8" else e2m1.round_sr_exact
    return functools.partial(sr, bits=bits)


def _block_bits(spec: QuantSpec, x: torch.Tensor, key: torch.Tensor, multiple: int):
    """Random bits per block (MS-EDEN's scale rounding): those of each block's first element,
    laid out like the block scales."""
    blocks, dims = _blocked_index(spec, x, multiple)
    return random_bits(blocks.narrow(dims[0], 0, 1), key)


def _quantize_blocks(x: torch.Tensor, spec: QuantSpec, key, signs):
    """Core pipeline. Returns (values: fp32 blocked view, scales with size-1 block dims,
    amax or None)."""
    layout = spec.layout
    if spec.fmt == "bf16":
        return x.to(torch.bfloat16).float(), None, None
    multiple = 2 if spec.fmt in FP4_FORMATS else 1
    if spec.rht is not None:
        check_divides(spec.rht.size, x.shape[layout.axis], layout.axis)
        multiple = max(multiple, spec.rht.size)
    p = pad(x, layout, multiple)
    if spec.rht is not None:
        p = rht_dim(p, signs, layout.axis)
    xb, dims = to_blocks(p.float(), layout)
    rows = spec.amax == "row"
    if spec.rounding == "ms_eden":
        return ms_eden.quantize_blocks(xb, dims, spec.rht.size // 16,
                                       _block_bits(spec, x, key, multiple), spec.e4m3_limit)
    if spec.four_over_six:
        return four_over_six.quantize_blocks(xb, dims, spec.four_over_six, spec.e4m3_limit, rows)
    if spec.fmt == "nvfp4":
        return nvfp4.quantize_blocks(xb, dims, _rounder(spec, x, key, multiple), spec.order,
                                     rows)
    if spec.fmt == "mxfp4":
        return (*mxfp4.quantize_blocks(xb, dims, _rounder(spec, x, key, multiple),
                                       spec.mx_scale), None)
    q, scales = fp8.quantize_blocks(xb, dims, spec.fmt, spec.pow2_scales)
    return q.float(), scales, None


def runtime_inputs(x: torch.Tensor, spec: QuantSpec, seed: int, stream: Stream | None,
                    signs: torch.Tensor | None):
    """Tensors that vary per call: the SR key and the RHT sign vector."""
    stream = stream or Stream()
    random = spec.rounding in ("sr", "ms_eden")
    key = key_tensor(seed, stream.ids(), x.device) if random else None
    return key, rht_signs(x, spec, stream, signs)


def rht_signs(x: torch.Tensor, spec: QuantSpec, stream: Stream | None,
              signs: torch.Tensor | None) -> torch.Tensor | None:
    """The RHT sign vector on x's device: ``signs`` if given, else the spec's policy's for
    the stream (None without an RHT)."""
    if spec.rht is not None and signs is None:
        r, stream = spec.rht, stream or Stream()
        signs = sign_vector(r.size, r.signs, r.seed, stream.layer, stream.step, stream.call)
    return None if signs is None else to_device(signs.float(), x.device)


def quantize(x: torch.Tensor, fmt: str | QuantSpec = "nvfp4", *, seed: int = 0,
             stream: Stream | None = None, signs: torch.Tensor | None = None,
             **spec_fields) -> QTensor:
    """Quantize x (fp32, bf16 or fp16, any shape) to its storage form.

    >>> q = quantize(x, "nvfp4", block=(1, 16))
    >>> q = quantize(x, "mxfp4", block=(1, 32), rounding="sr", seed=0)
    >>> q = quantize(w, "nvfp4", block=(16, 16))           # 2D tiles: Q(w.T) == Q(w).T
    >>> q = quantize(x, "nvfp4", axis=0, rht=16)            # Wgrad operand, TE's signs

    seed, stream: select SR bits and RHT signs; signs: an explicit +-1 vector overriding the
    spec's sign policy. Other keywords are QuantSpec fields.
    """
    spec = make_spec(fmt, **spec_fields)
    key, signs = runtime_inputs(x, spec, seed, stream, signs)
    values, scales, amax = _quantize_blocks(x, spec, key, signs)
    if spec.fmt == "bf16":
        return QTensor(spec, values.to(torch.bfloat16), None, None, x.shape, signs)
    values = canonical(from_blocks(values, spec.layout), spec.layout)
    if spec.fmt in FP4_FORMATS:
        data = e2m1.pack(e2m1.to_codes(values))
    else:
        data = values.to(fp8.DTYPES[spec.fmt][0])
    return QTensor(spec, data, store_scales(scales, spec.layout), store_amax(amax, spec),
                   x.shape, signs)


# The two pipelines a compiler traces (quant/compiled.py). Both also return NVFP4's E4M3
# block scales, which the public functions drop: as a graph output a block's scale is computed
# once, not again in every pass over its elements; MX and FP8 scales are cheaper recomputed
# (benchmarks/RESULTS.md, E4M3 block scales as a graph output).


def fake_quantize_pipeline(x: torch.Tensor, key, signs, spec: QuantSpec):
    """-> (fake-quantized x in fp32, E4M3 block scales or None); key, signs: see
    ``runtime_inputs``."""
    values, scales, amax = _quantize_blocks(x, spec, key, signs)
    return dequantize_blocks(values, spec, scales, amax, x.shape), _as_output(scales)


def parts_pipeline(x: torch.Tensor, key, signs, spec: QuantSpec):
    """-> (local, amax, E4M3 block scales or None); see ``fake_quantize_parts``."""
    values, scales, amax = _quantize_blocks(x, spec, key, signs)
    local = decode_local(values, spec, scales, x.shape)
    return local, store_amax(amax, spec), _as_output(scales)


def _as_output(scales: torch.Tensor | None) -> torch.Tensor | None:
    """The scales worth storing from a compiled graph (see above): E4M3 only."""
    return scales if scales is not None and scales.dtype == torch.float8_e4m3fn else None


def fake_quantize(x: torch.Tensor, spec: str | QuantSpec = "nvfp4", *, seed: int = 0,
                  stream: Stream | None = None, signs: torch.Tensor | None = None,
                  **spec_fields) -> torch.Tensor:
    """quantize(x, ...).dequantize() in x's dtype, without packing; bit-identical to it."""
    spec = make_spec(spec, **spec_fields)
    key, signs = runtime_inputs(x, spec, seed, stream, signs)
    out, _ = fake_quantize_pipeline(x, key, signs, spec)
    return out.to(x.dtype)


def fake_quantize_parts(x: torch.Tensor, spec: str | QuantSpec = "nvfp4", *, seed: int = 0,
                        stream: Stream | None = None, signs: torch.Tensor | None = None,
                        **spec_fields):
    """A GEMM operand as a block-scaled tensor core sees it: (local, amax).

    local: fp32 [x.shape], element value x block decode scale (exact for FP4 formats);
    amax: NVFP4's fp32 0-d tensor amax, or [..., 1] per row (None for other formats), from
    which the GEMM scales its output (``nvfp4.gemm_alpha``). For MXFP4 and FP8 ``local`` is
    ``fake_quantize(x)``.
    """
    spec = make_spec(spec, **spec_fields)
    key, signs = runtime_inputs(x, spec, seed, stream, signs)
    local, amax, _ = parts_pipeline(x, key, signs, spec)
    return local, amax


def check_local_dtype(spec: QuantSpec, local_dtype: torch.dtype) -> None:
    """A ``local`` is computed in fp32 and may be returned in bf16 only where that is exact."""
    if local_dtype != torch.float32 and (local_dtype != torch.bfloat16 or not spec.bf16_exact):
        raise ValueError(f"local_dtype={local_dtype} is not exact for {spec.fmt}: use "
                         "torch.float32 (bfloat16 only for nvfp4 and mxfp4)")
