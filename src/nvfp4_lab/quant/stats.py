"""Per-operand quantization statistics, cheap enough to log every K steps.

For one quantized operand (after its RHT, if any):

    top_bin          fraction of elements on the top grid point (E2M1 +-6, E4M3 +-448)
    clipped          fraction of elements above it (by more than fp32 noise): saturated
                     because the E4M3 block scale rounded down (NVFP4) or the E8M0 scale
                     was floored (MXFP4 floor mode)
    underflow        fraction of nonzero inputs that quantize to zero
    scale_underflow  fraction of nonzero blocks whose scale lost precision: an E4M3 scale that
                     is zero or subnormal (NVFP4), the smallest E8M0 scale 2^-127 (MXFP4)
    rel_err          ||Q(x) - x|| / ||x||

and per layer ``wgrad/rel_err``, the relative error of the quantized dW against the product
of the unquantized operands: App. E.2's diagnostic, largest in the layers that need BF16.

The gradient-noise diagnostic of Chmiel et al., "FP4 All the Way" (arXiv 2505.19115): FP4
gradients stop helping once the gradient's norm falls below about sqrt(3) times the norm of
the quantization noise added to it. Logged as ``noise_ratio = ||g|| / ||Q(g) - g||`` for the
gradient operands (``dgrad.dy``, ``wgrad.dy``) and for the weight gradient itself
(``wgrad/noise_ratio``, dW against the unquantized product); the report draws it against
tokens with the sqrt(3) line (``analysis.reports.figures.noise_figure``).
The operand is quantized a second time here (eager, same seed, stream and signs, so the
same values) to read its codes and scales; that cost is paid on statistics steps only.
"""
from __future__ import annotations

import torch

from ..formats import QuantSpec, Stream, quantize
from ..formats.blocks import from_canonical, pad, store_scales, to_blocks, unpad
from ..formats.fp8 import DTYPES
from ..formats.hadamard import rht_dim
from ..formats.spec import FP4_FORMATS

_E4M3_MIN_NORMAL = 2.0 ** -6
_E8M0_MIN = 2.0 ** -127
_CLIP_TOL = 2.0 ** -16  # scale arithmetic is a few fp32 ulps (2^-23) off; clipping by an
# E4M3 scale rounded down is at least 2^-10 relative unless the scale was nearly exact


def rel_err(approx: torch.Tensor, exact: torch.Tensor) -> float:
    """||approx - exact|| / ||exact|| in fp32 (0 when both are zero)."""
    a, e = approx.float(), exact.float()
    denom = torch.linalg.vector_norm(e)
    num = torch.linalg.vector_norm(a - e)
    return float(num / denom) if denom > 0 else float(num)


def noise_ratio(approx: torch.Tensor, exact: torch.Tensor) -> float | None:
    """||exact|| / ||approx - exact|| in fp32: the signal-to-quantization-noise ratio of a
    gradient; None when it was quantized exactly (no noise, nothing to log)."""
    a, e = approx.float(), exact.float()
    noise = torch.linalg.vector_norm(a - e)
    return float(torch.linalg.vector_norm(e) / noise) if noise > 0 else None


def operand_stats(x: torch.Tensor, spec: QuantSpec, *, seed: int = 0,
                  stream: Stream | None = None, signs: torch.Tensor | None = None,
                  gradient: bool = False) -> dict[str, float]:
    """Statistics of quantizing x [any shape] with spec (see the module docstring);
    ``gradient``: x is a gradient, so its ``noise_ratio`` is logged too."""
    q = quantize(x, spec, seed=seed, stream=stream, signs=signs)
    layout = spec.layout
    xr = (rht_dim(x, q.rht_signs, layout.axis) if spec.rht else x).float()
    deq = q.dequantize()
    values = q.values()
    if layout.kind != "tensor":
        values = unpad(from_canonical(values, layout), layout, x.shape)
    top = 6.0 if spec.fmt in FP4_FORMATS else torch.finfo(DTYPES[spec.fmt][0]).max
    # a block whose scale underflowed to 0 holds codes +-6 that decode to 0 (as in TE): those
    # elements are underflow, not top-bin
    on_top = (values.abs() == top) & (deq != 0)
    nonzero = xr != 0
    # clipped: above the top grid point by more than the ulps of the scale arithmetic
    above = xr.abs() > deq.abs() * (1 + _CLIP_TOL)
    out = {
        "top_bin": float(on_top.float().mean()),
        "clipped": float((on_top & above).float().mean()),
        "underflow": float((nonzero & (deq == 0)).sum() / nonzero.sum().clamp_min(1)),
        "rel_err": rel_err(deq, xr),
    }
    ratio = noise_ratio(deq, xr) if gradient else None
    if ratio is not None:
        out["noise_ratio"] = ratio
    if spec.fmt in FP4_FORMATS:
        xb, dims = to_blocks(pad(xr, layout, 2), layout)
        live = store_scales(xb.abs().amax(dim=dims, keepdim=True), layout) > 0
        s = q.scales.float()
        low = s < _E4M3_MIN_NORMAL if spec.fmt == "nvfp4" else s <= _E8M0_MIN
        out["scale_underflow"] = float((low & live).sum() / live.sum().clamp_min(1))
    return out
