"""The launch tracer (``quant/launches.py``) on Triton kernels: each ``kernel[grid](...)`` is
one launch, the interpreter's own tensor ops are none, and the NVFP4 operands of a layer step
launch the kernels ``kernels/README.md`` describes."""
from __future__ import annotations

from collections import Counter

import pytest
import torch
import triton
import triton.language as tl

from nvfp4_lab.formats.rng import key_tensor
from nvfp4_lab.quant import QuantLinear, preset
from nvfp4_lab.quant.backends import TritonBackend
from nvfp4_lab.quant.launches import H2D, H2D_IMPLIED, Kind, linear_step, trace


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
    quantize pass and the zeroed amax each; SR keys for the two gradient operands and the
    Wgrad signs, once in forward and once in backward, go to the device: four copies."""
    layer = QuantLinear(64, 32, recipe=preset("nvfp4"), backend=TritonBackend())
    t = linear_step(layer, 64)
    names = t.names()
    assert (names["fp4._amax_kernel"], names["fp4._quantize_kernel"]) == (5, 5)
    assert (names["aten.zeros.default"], names[H2D], names[H2D_IMPLIED]) == (5, 4, 0)
    assert t.count(Kind.triton) == 10


def test_a_failing_step_leaves_nothing_set():
    from triton.runtime.jit import KernelInterface

    from nvfp4_lab.formats.device import on_cuda

    before = KernelInterface.__getitem__

    def step():
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        trace(step, [])
    assert KernelInterface.__getitem__ is before and not on_cuda(torch.device("cpu"))
