"""The launch tracer (``quant/launches.py``) on Triton kernels: each ``kernel[grid](...)`` is
one launch, the interpreter's own tensor ops are none, and the NVFP4 operands of a layer step
launch the kernels ``kernels/README.md`` describes."""
from __future__ import annotations

import os
from collections import Counter

import pytest
import torch
import triton
import triton.language as tl

from nvfp4_lab.formats.rng import key_tensor
from nvfp4_lab.quant import QuantLinear, operand_plan, preset
from nvfp4_lab.quant.backends import TritonBackend
from nvfp4_lab.quant.launches import H2D, H2D_IMPLIED, Kind, linear_step, trace

# the tracer sees CPU tensors through Triton's interpreter; compiled kernels on a GPU machine
# refuse CPU tensors (benchmarks/gpu_check.sh leaves this file out for that reason)
pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="traces CPU tensors: needs Triton's interpreter")


@triton.jit
def _add_one(x_ptr, key_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    k = tl.load(key_ptr)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1 + k * 0, mask=offs < n)


def test_each_kernel_launch_is_one_launch_and_runs():
    x = torch.zeros(40)
    key = key_tensor(0, (1, 2), x.device)  # made before the trace: a host tensor there

    def program():
        for _ in range(3):
            _add_one[(triton.cdiv(40, 16),)](x, key, 40, BLOCK=16)
        x.add_(1)

    t = trace(program, [x])
    assert t.names() == Counter({"test_launch_trace._add_one": 3, H2D_IMPLIED: 1,
                                 "aten.add_.Tensor": 1})
    assert t.count(Kind.triton) == 3 and torch.equal(x, torch.full((40,), 4.0))


def test_nvfp4_operands_launch_amax_and_quantize_kernels():
    """Five NVFP4 operands (dgrad.w reuses Fprop's 16x16 weight tiles): an amax pass, a
    quantize pass and the zeroed amax each; one epilogue a GEMM. Nothing is copied to the
    device: the SR keys travel as kernel arguments, and the Wgrad signs were copied by the
    first step and kept there."""
    layer = QuantLinear(64, 32, recipe=preset("nvfp4"), backend=TritonBackend())
    t = linear_step(layer, 64)
    names = t.names()
    assert (names["fp4._amax_kernel"], names["fp4._quantize_kernel"]) == (5, 5)
    assert (names["aten.zeros.default"], names[H2D], names[H2D_IMPLIED]) == (5, 0, 0)
    assert names["epilogue._epilogue_kernel"] == 3 and t.count(Kind.triton) == 13
    # with the 3 GEMMs and the accumulation's add, nothing else: 22 launches
    assert (names["aten.mm.dtype"], names["aten.add_.Tensor"], t.launches) == (3, 1, 22)


# Launches the arithmetic needs per quantized operand: NVFP4 zeroes its amax, reduces it and
# quantizes; MXFP4 and FP8 (per block) quantize in one pass. Per GEMM: the GEMM and one
# epilogue (alpha, the rounding and the store); per step: the gradient accumulation's add.
PER_OPERAND = {"nvfp4": 3, "mxfp4": 1, "fp8": 1}


def needed(recipe) -> int:
    """The launches of one step of ``recipe`` that the arithmetic needs."""
    operands = [o for o in operand_plan(recipe).values() if o.spec is not None and not o.reuse]
    return len(operands) * PER_OPERAND[recipe.format] + 3 * 2 + 1


@pytest.mark.parametrize("name", ["nvfp4", "nvfp4_base", "nvfp4_4over6", "mxfp4", "fp8"])
def test_a_step_launches_what_the_arithmetic_needs(name):
    """Quantize passes, GEMMs, one epilogue each, the accumulation: nothing else (no scale
    arithmetic on 0-d tensors, no separate casts, no per-step copies to the device)."""
    recipe = preset(name)
    layer = QuantLinear(64, 32, recipe=recipe, backend=TritonBackend())
    t = linear_step(layer, 64)
    assert t.launches == needed(recipe), t.names()
    assert t.count(Kind.gemm) == 3 and t.names()["epilogue._epilogue_kernel"] == 3


def test_a_failing_step_leaves_nothing_set():
    from triton.runtime.jit import KernelInterface

    from nvfp4_lab.formats.device import on_cuda

    before = KernelInterface.__getitem__

    def step():
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        trace(step, [])
    assert KernelInterface.__getitem__ is before and not on_cuda(torch.device("cpu"))
