"""QTensor: a quantized tensor in its storage form.

    data    FP4: uint8 packed E2M1 codes [..., L_pad / 2] (element 2j in the low nibble);
            FP8: float8_e4m3fn / float8_e5m2 elements; BF16: bfloat16 values.
            Stored in the canonical layout of ``blocks.py`` (blocked axis last, padded).
    scales  NVFP4: float8_e4m3fn; MXFP4: float8_e8m0fnu; FP8: float32 decode scales.
            [..., n_blocks] per block, [..., R/b, C/b] per 2D tile, [1] per tensor.
    amax    NVFP4: fp32 0-d tensor amax (after the RHT, if any), or [..., 1] one per row
            (``amax="row"``); else None.
    shape   the shape of the tensor that was quantized.

With an RHT, the stored tensor is x . R, the operand a GEMM sees; ``dequantize`` returns
that rotated tensor. ``rht_signs`` keeps the sign vector that was used, so
``hadamard.rht(q.dequantize(), size, axis, q.rht_signs, inverse=True)`` undoes it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import e2m1, fp8, mxfp4, nvfp4
from .blocks import from_blocks, from_canonical, load_scales, to_blocks, unpad
from .spec import FP4_FORMATS, QuantSpec


@dataclass
class QTensor:
    spec: QuantSpec
    data: torch.Tensor
    scales: torch.Tensor | None
    amax: torch.Tensor | None
    shape: torch.Size
    rht_signs: torch.Tensor | None = None

    @property
    def fmt(self) -> str:
        return self.spec.fmt

    @property
    def block(self) -> tuple[int, int] | None:
        return self.spec.block

    def codes(self) -> torch.Tensor:
        """FP4 codes unpacked, uint8 in the canonical layout (padding included)."""
        if self.fmt not in FP4_FORMATS:
            raise TypeError(f"{self.fmt} has no FP4 codes")
        return e2m1.unpack(self.data)

    def values(self) -> torch.Tensor:
        """Element values before scaling, fp32 in the canonical layout (E2M1 or FP8 grid)."""
        return e2m1.from_codes(self.codes()) if self.fmt in FP4_FORMATS else self.data.float()

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The decoded tensor, of ``shape``, in ``dtype`` (one rounding from fp32)."""
        layout = self.spec.layout
        if self.fmt == "bf16":
            return self.values().to(dtype)
        vb, _ = to_blocks(from_canonical(self.values(), layout), layout)
        scales = load_scales(self.scales, layout, vb.dim())
        amax = self.amax.unsqueeze(-1) if self.spec.amax == "row" else self.amax  # [..., 1, 1]
        return dequantize_blocks(vb, self.spec, scales, amax, self.shape).to(dtype)

    @property
    def has_nonfinite(self) -> bool:
        """True if any block held NaN/Inf (its scale is NaN). Reads the scales only."""
        if self.scales is None:
            return not bool(torch.isfinite(self.data).all())
        return bool(torch.isnan(self.scales.float()).any())

    def __repr__(self) -> str:
        s = self.spec
        extra = f", rht={s.rht.size}/{s.rht.signs}" if s.rht else ""
        extra += f", rounding={s.rounding}" + (f"/{s.sr_mode}" if s.rounding == "sr" else "")
        amax = ("" if self.amax is None else f", amax={self.amax.item():.6g}"
                if self.amax.dim() == 0 else f", amax per row {tuple(self.amax.shape)}")
        scales = (f", scales={self.scales.dtype} {tuple(self.scales.shape)}"
                  if self.scales is not None else "")
        return (f"QTensor({s.fmt}, shape={tuple(self.shape)}, block={s.block}, "
                f"axis={s.axis}{extra}{amax}{scales}, data={self.data.dtype} "
                f"{tuple(self.data.shape)})")


def store_amax(amax: torch.Tensor | None, spec: QuantSpec) -> torch.Tensor | None:
    """The pipeline's amax (0-d, or [..., 1, 1] per row on the blocked view) as stored and
    as the GEMM takes it: 0-d, or [..., 1] per row (the row's output scale); None unless
    NVFP4."""
    if spec.fmt != "nvfp4":
        return None
    return amax.squeeze(-1) if spec.amax == "row" else amax


def _scaled_blocks(values: torch.Tensor, spec: QuantSpec, scales, amax=None) -> torch.Tensor:
    """values * block scales, in the blocked view; NVFP4 with ``amax``: the decoded values
    (``nvfp4.dequantize_blocks``), else the GEMM's local operand.

    Scaling happens before the padding is sliced off: inductor (torch 2.13, CPU) miscompiles
    a pointwise op applied after that slice (it reads past the written buffer).
    """
    if spec.fmt == "nvfp4":
        if amax is None:
            return values * scales.float()
        return nvfp4.dequantize_blocks(values, scales, amax, spec.order, spec.e4m3_limit)
    if spec.fmt == "mxfp4":
        return mxfp4.dequantize_blocks(values, scales)
    return fp8.dequantize_blocks(values, scales)


def decode_local(values: torch.Tensor, spec: QuantSpec, scales,
                 shape: torch.Size) -> torch.Tensor:
    """Element values (fp32 blocked view) times their block scales -> fp32 tensor of ``shape``.

    For FP4 formats every product is exact (an E2M1 value has 2 significant bits, an E4M3 or
    E8M0 scale at most 4), so it is what a block-scaled tensor core multiplies; NVFP4's tensor
    amax is left out, to be applied to the GEMM output (``nvfp4.gemm_alpha``).
    """
    if spec.fmt == "bf16":
        return values
    return unpad(from_blocks(_scaled_blocks(values, spec, scales), spec.layout), spec.layout,
                 shape)


def dequantize_blocks(values: torch.Tensor, spec: QuantSpec, scales, amax,
                      shape: torch.Size) -> torch.Tensor:
    """Element values (fp32 blocked view) and keepdim scales -> fp32 tensor of ``shape``.

    Shared by QTensor.dequantize and fake_quantize, so that both decode identically (NVFP4:
    TE's dequantize arithmetic, ``nvfp4.dequantize_blocks``).
    """
    if spec.fmt == "bf16":
        return values
    return unpad(from_blocks(_scaled_blocks(values, spec, scales, amax), spec.layout),
                 spec.layout, shape)
