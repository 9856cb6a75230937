"""``fake_quantize(..., backend="compiled")`` is bitwise equal to eager on adversarial inputs
through its torch.compile path, the one every input that is not whole blocks takes (inputs of
whole blocks take an AOTInductor package of the same graph: test_packaged.py), and the SR
stream ids are runtime inputs: a new step changes the random bits without recompiling.

One compiled graph per (spec, dtype), its sizes symbolic (a graph serves every layer's shape;
shapes with partial blocks get a second one, with the padding); the adversarial tensors of a
test share one shape so each spec compiles once per dtype. The SR spec is checked in fp32 only,
on a shape without partial 16-blocks: inductor needs ~35 s (fp32, [64, 48]) to ~100 s ([64, 40])
of Scheduler.codegen for its fused hash kernel on this CPU; bf16 and padding are covered by the
other specs.
"""
from __future__ import annotations

import importlib

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from nvfp4_lab.formats import QuantSpec, Stream, fake_quantize, fake_quantize_parts

quantize_module = importlib.import_module("nvfp4_lab.formats.quantizer")

pytestmark = pytest.mark.slow

SHAPE = (64, 40)  # 40: a partial block for every block size (padding)
SR_SPEC = QuantSpec("nvfp4", rounding="sr", sr_mode="hw8")
SPECS = {
    "nvfp4_1d": QuantSpec("nvfp4"),
    "nvfp4_2d": QuantSpec("nvfp4", block=(16, 16)),
    "mxfp4_ceil": QuantSpec("mxfp4", mx_scale="ceil"),
    "nvfp4_rht16_axis0": QuantSpec("nvfp4", axis=0, rht=16),
    "fp8_block": QuantSpec("fp8_e4m3", block=(1, 32)),
}
TIES = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]


def adversarial(kind: str, dtype: torch.dtype, shape=SHAPE) -> torch.Tensor:
    """[64, 40] (default) tensors (padded to whole blocks inside), built in fp32 and cast to dtype.

    ties:      E2M1 ties and their fp32 neighbours in blocks whose amax is 6 (MXFP4 and
               NVFP4 encode factors ~1), +-0.0, and rows 2^-8 .. 2^-36 smaller than the
               tensor amax (subnormal and zero E4M3 scales, tiny E8M0 exponents).
    nonfinite: the same with NaN, +Inf, -Inf in a few blocks (including an RHT chunk).
    range:     one binade per row from 2^-140 (fp32 subnormal) to 2^126 (near FLT_MAX).
    """
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g)
    if kind == "range":
        e = torch.linspace(-140, 126, shape[0]).round()
        x = x.clamp(-1.9, 1.9) * torch.exp2(e)[:, None]
        x[5, 7] = 3.0e38
        x[6, :] = 1e-45  # the smallest fp32 subnormal
    else:
        t = torch.tensor(TIES)
        ties = torch.stack([t, torch.nextafter(t, t + 1), torch.nextafter(t, t - 1)]).flatten()
        for r in range(0, 16):
            x[r, 1:22] = ties * (1 if r % 2 else -1)
        x[:, 0] = 6.0
        x[:, 32] = -6.0
        x[16:20, 5:11] = 0.0
        x[20:24, 5:11] = -0.0
        x[24:40] *= torch.exp2(-torch.arange(8, 40, 2.0))[:, None]
        if kind == "nonfinite":
            x[3, 36] = float("nan")
            x[10, 2] = float("inf")
            x[33, 17] = float("-inf")
            x[50, 39] = float("nan")
    return x.to(dtype)


def torch_compiled(x: torch.Tensor, spec: QuantSpec, parts: bool = False, seed: int = 0,
                   stream: Stream | None = None):
    """The compiled backend's torch.compile path for x, also where x is whole blocks."""
    key, signs = quantize_module.runtime_inputs(x, spec, seed, stream, None)
    if parts:
        local, amax, _ = quantize_module._compiled(spec, parts=True).fallback(x, key, signs)
        return local, amax
    return quantize_module._compiled(spec).fallback(x, key, signs)[0].to(x.dtype)


def assert_bitwise(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    assert torch.equal(nan_a, nan_b)
    ia = a.view(torch.int16 if a.dtype == torch.bfloat16 else torch.int32)
    ib = b.view(ia.dtype)
    assert torch.equal(ia[~nan_a], ib[~nan_b])  # includes the sign of zero


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", SPECS)
def test_compiled_equals_eager(name, dtype):
    spec = SPECS[name]
    stream = Stream(layer=1, step=2)
    for kind in ("ties", "nonfinite", "range"):
        x = adversarial(kind, dtype)
        eager = fake_quantize(x, spec, seed=7, stream=stream)
        compiled = fake_quantize(x, spec, seed=7, stream=stream, backend="compiled")
        assert_bitwise(compiled, eager)
        if kind == "nonfinite":
            assert torch.isnan(compiled).any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", SPECS)
def test_compiled_parts_equal_eager(name, dtype):
    """The GEMM-operand form (local values, tensor scale) on padded adversarial shapes."""
    spec = SPECS[name]
    for kind in ("ties", "range"):
        x = adversarial(kind, dtype)
        eager = fake_quantize_parts(x, spec, seed=7)
        compiled = fake_quantize_parts(x, spec, seed=7, backend="compiled")
        assert_bitwise(compiled[0], eager[0])
        assert (compiled[1] is None) == (eager[1] is None)
        if eager[1] is not None:
            assert_bitwise(compiled[1], eager[1])


def test_compiled_sr_hw8_equals_eager():
    for kind in ("ties", "nonfinite", "range"):
        x = adversarial(kind, torch.float32, (64, 48))
        for seed, stream in ((7, Stream(layer=1, step=2)), (0, Stream(gemm=2, operand=1))):
            eager = fake_quantize(x, SR_SPEC, seed=seed, stream=stream)
            compiled = torch_compiled(x, SR_SPEC, seed=seed, stream=stream)
            assert_bitwise(compiled, eager)


def test_compiled_sr_new_step_new_bits_no_recompile():
    """The step enters as the SR key tensor: a new step must neither add a graph (dynamo's
    counter) nor trigger a recompile (error_on_recompile turns one into an exception)."""
    x = adversarial("ties", torch.float32, (64, 48))
    torch_compiled(x, SR_SPEC, seed=1, stream=Stream(step=0))  # warm
    graphs = counters["stats"]["unique_graphs"]
    outs = {}
    with torch._dynamo.config.patch(error_on_recompile=True):
        for step in (1, 2):
            outs[step] = torch_compiled(x, SR_SPEC, seed=1, stream=Stream(step=step))
    assert counters["stats"]["unique_graphs"] == graphs
    for step in (1, 2):
        assert_bitwise(outs[step], fake_quantize(x, SR_SPEC, seed=1, stream=Stream(step=step)))
    assert not torch.equal(outs[1], outs[2])


def test_compiled_one_graph_serves_every_shape():
    """Layers of other shapes reuse the graph of the first (sizes are symbols, so a model
    compiles one graph per spec, not per layer shape), square or not, with the eager bits."""
    spec = QuantSpec("nvfp4", axis=0, rht=16)  # the Wgrad operand: blocks along tokens
    shapes = [(64, 64), (32, 80), (128, 16), (48, 208)]
    torch_compiled(adversarial("ties", torch.float32, shapes[0]), spec, parts=True)
    graphs = counters["stats"]["unique_graphs"]
    with torch._dynamo.config.patch(error_on_recompile=True):
        for shape in shapes[1:]:
            x = adversarial("range", torch.float32, shape)
            compiled = torch_compiled(x, spec, parts=True, seed=3)
            eager = fake_quantize_parts(x, spec, seed=3)
            assert_bitwise(compiled[0], eager[0])
            assert_bitwise(compiled[1], eager[1])
    assert counters["stats"]["unique_graphs"] == graphs
