"""``quant.compiled.fake_quantize`` is bitwise equal to eager on adversarial inputs
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

import pytest
import torch
import torch._dynamo
from helpers.adversarial import SPECS, SR_SPEC, adversarial, assert_bitwise
from helpers.backends import needs_compiled
from torch._dynamo.utils import counters

from nvfp4_lab.formats import QuantSpec, Stream, fake_quantize, fake_quantize_parts
from nvfp4_lab.formats.quantizer import runtime_inputs
from nvfp4_lab.quant import compiled

pytestmark = [pytest.mark.slow, needs_compiled]

def torch_compiled(x: torch.Tensor, spec: QuantSpec, parts: bool = False, seed: int = 0,
                   stream: Stream | None = None):
    """The compiled backend's torch.compile path for x, also where x is whole blocks."""
    key, signs = runtime_inputs(x, spec, seed, stream, None)
    if parts:
        local, amax, _ = compiled._compiled(spec, parts=True).fallback(x, key, signs)
        return local, amax
    return compiled._compiled(spec).fallback(x, key, signs)[0].to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", SPECS)
def test_compiled_equals_eager(name, dtype):
    spec = SPECS[name]
    stream = Stream(layer=1, step=2)
    for kind in ("ties", "nonfinite", "range"):
        x = adversarial(kind, dtype)
        eager = fake_quantize(x, spec, seed=7, stream=stream)
        got = compiled.fake_quantize(x, spec, seed=7, stream=stream)
        assert_bitwise(got, eager)
        if kind == "nonfinite":
            assert torch.isnan(got).any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", SPECS)
def test_compiled_parts_equal_eager(name, dtype):
    """The GEMM-operand form (local values, tensor scale) on padded adversarial shapes."""
    spec = SPECS[name]
    for kind in ("ties", "range"):
        x = adversarial(kind, dtype)
        eager = fake_quantize_parts(x, spec, seed=7)
        got = compiled.fake_quantize_parts(x, spec, seed=7)
        assert_bitwise(got[0], eager[0])
        assert (got[1] is None) == (eager[1] is None)
        if eager[1] is not None:
            assert_bitwise(got[1], eager[1])


def test_compiled_sr_hw8_equals_eager():
    for kind in ("ties", "nonfinite", "range"):
        x = adversarial(kind, torch.float32, (64, 48))
        for seed, stream in ((7, Stream(layer=1, step=2)), (0, Stream(gemm=2, operand=1))):
            eager = fake_quantize(x, SR_SPEC, seed=seed, stream=stream)
            got = torch_compiled(x, SR_SPEC, seed=seed, stream=stream)
            assert_bitwise(got, eager)


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
            got = torch_compiled(x, spec, parts=True, seed=3)
            eager = fake_quantize_parts(x, spec, seed=3)
            assert_bitwise(got[0], eager[0])
            assert_bitwise(got[1], eager[1])
    assert counters["stats"]["unique_graphs"] == graphs
