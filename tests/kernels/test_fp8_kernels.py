"""The FP8 Triton kernels (``nvfp4_kernels.fp8``) against the reference, bit for bit.

``fp8_operand(x, spec)`` must return ``fake_quantize_parts(x, spec)[0]`` exactly: the fp32 bit
patterns are compared (so -0.0 vs +0.0 counts), except that a NaN only has to be a NaN (the
reference's NaN payloads and signs come from whatever the CPU propagates).

On the CPU the kernels run in Triton's interpreter (``conftest.py`` sets TRITON_INTERPRET=1),
so shapes stay small (one partial block per dim, [130, 140]); on a CUDA machine the same tests
run the compiled kernels against the CPU reference, and the ``cuda`` tests add realistic
shapes. Inputs, each built for every layout so that every block gets what it needs:

    ties     every block's amax is fp8_max * 2^k (an exact, power-of-two scale), and its
             elements are fp8 grid values, midpoints between neighbours (exact RNE ties,
             normal and subnormal) and their fp32 neighbours, +-0.0; k from -130 (fp32
             subnormal elements) to 100
    random   normal values with row magnitudes e^(3 N(0,1)): inexact scales, saturation
    special  zero blocks (+0 and -0), blocks of fp32 subnormals (scale clamped to FLT_MAX,
             subnormal decode scale), values near FLT_MAX, NaN, +Inf and -Inf blocks
"""
from __future__ import annotations

import pytest
import torch
from helpers.kernel_cases import FP8_SHAPE, random_tensor, special_tensor, ties_tensor

from nvfp4_kernels import fp8 as kernels
from nvfp4_lab.formats import QuantSpec, fake_quantize_parts

# the interpreter (numpy) warns where a scale overflows to inf before it is clamped to FLT_MAX
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
FMTS = ("fp8_e4m3", "fp8_e5m2")
# layout name -> (QuantSpec fields, the block's (rows, cols) on a 2-D tensor)
LAYOUTS = {
    "1x32": (dict(block=(1, 32)), (1, 32)),
    "1x128": (dict(block=(1, 128)), (1, 128)),
    "128x128": (dict(block=(128, 128)), (128, 128)),
    "tensor": (dict(block=None), FP8_SHAPE),
    "32x1": (dict(block=(32, 1)), (32, 1)),  # 1D along dim -2
    "axis0": (dict(block=(1, 32), axis=0), (32, 1)),  # the Wgrad operands' layout
}


def assert_same(got: torch.Tensor, want: torch.Tensor) -> None:
    """Equal fp32 bit patterns, NaN only as NaN."""
    assert got.dtype == torch.float32 and got.shape == want.shape
    got, want = got.cpu(), want.cpu()
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan), "NaN positions differ"
    bad = got.view(torch.int32)[~nan] != want.view(torch.int32)[~nan]
    assert not bad.any(), (f"{int(bad.sum())} of {bad.numel()} values differ, e.g. "
                           f"{got[~nan][bad][:4].tolist()} vs {want[~nan][bad][:4].tolist()}")


def check(x: torch.Tensor, spec: QuantSpec) -> None:
    """The kernel on DEVICE against the reference on the CPU."""
    assert_same(kernels.fp8_operand(x.to(DEVICE), spec), fake_quantize_parts(x, spec)[0])


def spec_of(fmt: str, layout: str, pow2: bool) -> QuantSpec:
    return QuantSpec(fmt, pow2_scales=pow2, **LAYOUTS[layout][0])


@pytest.mark.parametrize("pow2", [False, True], ids=["fp32scale", "pow2"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("fmt", FMTS)
def test_matches_reference(fmt, layout, pow2):
    spec = spec_of(fmt, layout, pow2)
    ties = ties_tensor(fmt, LAYOUTS[layout][1])
    check(ties, spec)
    check(random_tensor(), spec)
    check(random_tensor().to(torch.bfloat16), spec)
    if layout != "tensor":  # one non-finite element makes a whole tensor NaN: see below
        check(special_tensor(), spec)


def test_ties_are_ties():
    """The ties input really holds RNE ties after scaling, in both directions of 'even'."""
    spec = QuantSpec("fp8_e4m3", block=(1, 32))
    x = torch.full((1, 32), 448.0)
    x[0, 1:5] = torch.tensor([1.0625, 1.1875, 2.0 ** -10, 3 * 2.0 ** -10])
    got = kernels.fp8_operand(x.to(DEVICE), spec).cpu()
    assert got[0, 1:5].tolist() == [1.0, 1.25, 0.0, 2.0 ** -8]
    assert_same(got, fake_quantize_parts(x, spec)[0])


@pytest.mark.parametrize("fmt", FMTS)
def test_per_tensor_special(fmt):
    """Per-tensor scaling of a zero, a tiny (subnormal amax), a huge and a non-finite tensor."""
    for pow2 in (False, True):
        spec = QuantSpec(fmt, block=None, pow2_scales=pow2)
        for x in (torch.zeros(5, 7), -torch.zeros(3, 4), random_tensor() * 1e-43,
                  random_tensor().clamp(-1, 1) * 3.0e38, special_tensor()):
            check(x, spec)
    x = torch.ones(8, 8)
    x[2, 2] = float("nan")
    assert torch.isnan(kernels.fp8_operand(x.to(DEVICE), QuantSpec(fmt, block=None))).all()


@pytest.mark.parametrize("fmt", FMTS)
def test_shapes(fmt):
    """Leading dims, blocks along a middle axis, 1-D and 0-d tensors, a non-contiguous input,
    fp16, and batched 2D tiles."""
    x3 = random_tensor(5)[:, :120].reshape(13, 10, 120)
    check(x3, QuantSpec(fmt, block=(1, 32)))
    check(x3, QuantSpec(fmt, block=(1, 16), axis=1))
    check(x3, QuantSpec(fmt, block=(16, 16)))
    check(x3.to(torch.float16), QuantSpec(fmt, block=(1, 32)))
    check(random_tensor(6)[0], QuantSpec(fmt, block=(1, 32)))
    check(torch.tensor(-3.5), QuantSpec(fmt, block=None))
    t = random_tensor(7).T
    assert_same(kernels.fp8_operand(t.to(DEVICE), QuantSpec(fmt, block=(1, 32))),
                fake_quantize_parts(t.contiguous(), QuantSpec(fmt, block=(1, 32)))[0])


def test_reference_fallbacks():
    """What the kernels do not cover goes to the reference: the same errors and results."""
    spec = QuantSpec("fp8_e4m3", block=(1, 32))
    with pytest.raises(ValueError, match="0-d"):
        kernels.fp8_operand(torch.tensor(1.0, device=DEVICE), spec)
    assert kernels.fp8_operand(torch.zeros(0, 32, device=DEVICE), spec).shape == (0, 32)
    x = random_tensor(8).double()
    assert_same(kernels.fp8_operand(x.to(DEVICE), spec), fake_quantize_parts(x, spec)[0])


def test_supports():
    assert kernels.supports(QuantSpec("fp8_e4m3", block=(1, 128)))
    assert kernels.supports(QuantSpec("fp8_e5m2", block=None, pow2_scales=True))
    assert kernels.supports(QuantSpec("fp8_e4m3", block=(128, 128)))
    assert kernels.supports(QuantSpec("fp8_e4m3", block=(1, 128), axis=0))
    assert not kernels.supports(QuantSpec("fp8_e4m3", block=(1, 128), rht=16))
    assert not kernels.supports(QuantSpec("nvfp4"))
    assert not kernels.supports(QuantSpec("bf16"))


@cuda
@pytest.mark.parametrize("layout", ["1x128", "128x128", "tensor", "axis0"])
@pytest.mark.parametrize("fmt", FMTS)
def test_cuda_realistic_shapes(fmt, layout):
    """[8192, 4096] bf16 activations/weights and a [4, 1024, 2048] batch, against the
    reference computed on the same GPU."""
    g = torch.Generator(device="cuda").manual_seed(0)
    for shape in ((8192, 4096), (4, 1024, 2048)):
        x = torch.randn(shape, device="cuda", generator=g) * torch.exp(
            3 * torch.randn(*shape[:-1], 1, device="cuda", generator=g))
        x = x.to(torch.bfloat16)
        for pow2 in (False, True):
            spec = spec_of(fmt, layout, pow2)
            assert_same(kernels.fp8_operand(x, spec), fake_quantize_parts(x, spec)[0])
