"""The compiled backend's quantizers: ``fake_quantize`` and ``fake_quantize_parts`` of
``formats.quantizer``, same arguments, same bits, from inductor's copy of the same pipeline:
on a CPU an AOTInductor package for inputs of whole blocks, built once per machine and loaded
by every later process (packaged.py), ``torch.compile`` for every other input.

Bit-identical to eager on a CPU (tested on adversarial inputs): every operation is elementwise
or a max reduction, which inductor's C++ keeps in IEEE order. Two inductor behaviours need
care: a fused cast to bf16 stays fp32 without ``emulate_precision_casts``, and a bf16 output
sliced out of padded blocks is miscompiled (torch 2.13, CPU), so the graph returns fp32 and
the cast happens outside. Inductor's GPU code is not bit-exact (benchmarks/RESULTS.md, GPU
check): the backends never use it. Inductor is pointed at the user cache before anything here
compiles (``packaged.use_compile_cache``).
"""
from __future__ import annotations

import functools
from typing import Any

import torch

from ..formats.quantizer import (
    fake_quantize_pipeline,
    make_spec,
    parts_pipeline,
    runtime_inputs,
)
from ..formats.spec import QuantSpec, Stream
from .packaged import OPTIONS, PackagedQuantizer, use_compile_cache


@functools.cache
def _compiled(spec: QuantSpec, parts: bool = False) -> PackagedQuantizer:
    """fn(x, key, signs) compiled: an AOTInductor package for inputs of whole blocks
    (packaged.py), torch.compile for the rest; the same graph and bits either way."""
    use_compile_cache()
    # Every spec and input rank/dtype is one more graph of the same Python function, and
    # dynamo's per-function limit (8) would fail fullgraph compiles of a many-layer model.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 256)
    # emulate_precision_casts (packaged.OPTIONS): without it inductor keeps a fused
    # .to(bfloat16) (the RHT output) in fp32, and amax and scales change.
    fn = functools.partial(parts_pipeline if parts else fake_quantize_pipeline, spec=spec)
    traced = torch.compile(fn, fullgraph=True, dynamic=False, options=dict(OPTIONS))
    return PackagedQuantizer(fn, spec, f"{fn.func.__name__}|{spec!r}",
                             fallback=lambda x, key, signs: traced(_any_size(x), key, signs))


def _any_size(x: torch.Tensor) -> torch.Tensor:
    """A view of x whose sizes the torch.compile fallback takes as symbols: one graph per spec
    serves every layer's shape (benchmarks/RESULTS.md, Compiled quantizers for any size); the
    block and RHT sizes stay constants. Detached where no gradient is recorded (QuantGemm, the
    self-test): a master weight's requires_grad would be one more graph. (``dynamic=True``,
    which also makes the scalar inputs symbolic, stopped gcc on torch 2.13.)"""
    v = x.view(x.shape) if torch.is_grad_enabled() else x.detach()
    for d in range(v.dim()):
        torch._dynamo.maybe_mark_dynamic(v, d)
    return v


def fake_quantize(x: torch.Tensor, spec: str | QuantSpec = "nvfp4", *, seed: int = 0,
                  stream: Stream | None = None, signs: torch.Tensor | None = None,
                  **spec_fields: Any) -> torch.Tensor:
    """``formats.fake_quantize``, compiled."""
    spec = make_spec(spec, **spec_fields)
    key, signs = runtime_inputs(x, spec, seed, stream, signs)
    out: torch.Tensor = _compiled(spec)(x, key, signs)[0]
    return out.to(x.dtype)  # outside the graph: see the module docstring


def fake_quantize_parts(x: torch.Tensor, spec: str | QuantSpec = "nvfp4", *, seed: int = 0,
                        stream: Stream | None = None, signs: torch.Tensor | None = None,
                        **spec_fields: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``formats.fake_quantize_parts``, compiled: (local, amax)."""
    spec = make_spec(spec, **spec_fields)
    key, signs = runtime_inputs(x, spec, seed, stream, signs)
    local, amax, _ = _compiled(spec, parts=True)(x, key, signs)
    return local, amax
