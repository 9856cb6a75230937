"""The launch tracer (``quant/launches.py``) on programs counted by hand, and the CUDA path it
forces: BF16 GEMM operands for FP4, FP32 for FP8, the BF16 nn.Linear step's six launches."""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from nvfp4_lab.formats.device import cuda_path, on_cuda
from nvfp4_lab.formats.rng import to_device
from nvfp4_lab.quant import QuantLinear, preset
from nvfp4_lab.quant.gemm import local_dtype
from nvfp4_lab.quant.launches import H2D, H2D_IMPLIED, NO_MOVE, Kind, linear_step, trace


def signs() -> torch.Tensor:
    """A sign vector made as ``hadamard.sign_vector`` makes one: three host ops."""
    return 1.0 - 2.0 * torch.tensor([1.0, 0.0, 1.0, 0.0])


def test_a_program_counted_by_hand():
    a = torch.randn(8, 16)

    def program():
        b = a.t()                                # view
        torch.empty_like(a)                      # allocation
        c = a * 2 + 1                            # 2 compute
        b.contiguous()                           # copy (a clone)
        c.contiguous()                           # nothing: already contiguous
        a.to(torch.bfloat16)                     # copy
        s = to_device(signs(), a.device)         # 3 host, 1 h2d copy
        a.narrow(1, 0, 4) * s                    # view, compute
        a.narrow(1, 4, 4) * signs()              # 3 host, view, implied h2d copy, compute
        torch.tensor(3.0) * a                    # host (lift_fresh), compute: a 0-d scalar
        a.sum().item()                           # compute, copy (read back to the host)

    t = trace(program, [a])
    assert {k: t.count(k) for k in Kind} == {
        Kind.triton: 0, Kind.gemm: 0, Kind.compute: 6, Kind.copy: 5, Kind.view: 3,
        Kind.alloc: 1, Kind.meta: 0, Kind.host: 7}
    assert t.launches == 11
    assert t.names(Kind.copy) == Counter({"aten.clone.default": 1, "aten._to_copy.default": 1,
                                          H2D: 1, H2D_IMPLIED: 1,
                                          "aten._local_scalar_dense.default": 1})


def test_a_device_tensor_moved_again_is_no_copy():
    a = torch.randn(4)

    def program():
        s = to_device(signs(), a.device)
        to_device(s, a.device)                   # on CUDA: s itself, no launch

    t = trace(program, [a])
    assert t.names() == Counter({H2D: 1}) and t.names(Kind.view) == Counter({NO_MOVE: 1})


def test_cuda_path_is_scoped():
    fp4 = QuantLinear(32, 32, recipe=preset("nvfp4")).plan["fprop.x"].spec
    cpu = torch.device("cpu")
    with cuda_path():
        assert on_cuda(cpu) and local_dtype(fp4, cpu) == torch.bfloat16
    assert not on_cuda(cpu) and local_dtype(fp4, cpu) == torch.float32


@pytest.mark.parametrize(("recipe", "gemm", "operand"), [
    ("nvfp4", "aten.mm.dtype", torch.bfloat16),      # FP4 locals, exact in BF16
    ("mxfp4", "aten.mm.dtype", torch.bfloat16),
    ("fp8", "aten.mm.default", torch.float32),       # FP8 locals need FP32
])
def test_the_cuda_path_gemms(recipe, gemm, operand):
    layer = QuantLinear(64, 32, recipe=preset(recipe))
    t = linear_step(layer, 96)
    assert [(op.name, [m.dtype for m in op.inputs], op.output.dtype) for op in t.gemms] == [
        (gemm, [operand, operand], torch.float32)] * 3
    # Fprop [96, 64] x [64, 32], Dgrad [96, 32] x [32, 64], Wgrad [32, 96] x [96, 64]
    assert [[m.shape for m in op.inputs] for op in t.gemms] == [
        [(96, 64), (64, 32)], [(96, 32), (32, 64)], [(32, 96), (96, 64)]]


@pytest.mark.parametrize(("x_dtype", "casts"), [(torch.bfloat16, 2), (torch.float32, 4)])
def test_the_bf16_linear_step_counted_by_hand(x_dtype, casts):
    """Forward: W cast to BF16 (autocast), Y = X W^T; backward: dX = dY W, dW = dY^T X, dW
    cast to FP32, added to the existing .grad. An FP32 X adds its cast and dX's cast back."""
    t = linear_step(torch.nn.Linear(64, 32, bias=False), 48, x_dtype)
    assert t.names() == Counter({"aten.mm.default": 3, "aten._to_copy.default": casts,
                                 "aten.add_.Tensor": 1})
    assert t.launches == 4 + casts


def test_a_fixed_sign_vector_is_copied_to_the_device_once():
    """MXFP4's Wgrad transform has fixed signs: copied by the first step and kept, so a later
    step copies only what changes per step, the reference's SR keys (dgrad.dy, wgrad.dy)."""
    t = linear_step(QuantLinear(64, 32, recipe=preset("mxfp4")), 64)
    assert t.names()[H2D] == 2
