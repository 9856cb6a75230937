"""The launch tracer (``quant/launches.py``) on programs counted by hand, and the CUDA path it
forces: each recipe's GEMMs in the dtypes docs/gpu_step.md states (its table is read here, so
the page and the code cannot drift apart), the BF16 nn.Linear step's six launches."""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch import nn

from nvfp4_lab.formats.device import cuda_path, on_cuda
from nvfp4_lab.formats.rng import to_device
from nvfp4_lab.quant import PRESETS, Backend, QuantLinear, convert, preset
from nvfp4_lab.quant.gemm import local_dtype
from nvfp4_lab.quant.launches import H2D, H2D_IMPLIED, NO_MOVE, Kind, linear_step, trace

DOC = Path(__file__).resolve().parents[3] / "docs" / "gpu_step.md"
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
CELL = re.compile(r"(\w+) x (\w+) -> (\w+)")
# tokens (a multiple of every RHT size) and the layer's widths, all different, so that each
# GEMM's output shape names it
TOKENS, IN, OUT = 128, 384, 256
OUTPUTS = {"fprop": (TOKENS, OUT), "dgrad": (TOKENS, IN), "wgrad": (OUT, IN)}


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


def documented_gemm_dtypes() -> dict[str, dict[str, tuple[list[torch.dtype], torch.dtype]]]:
    """docs/gpu_step.md, GEMM dtypes: {recipe: {gemm: (operand dtypes, output dtype)}}."""
    section = DOC.read_text().split("\n## GEMM dtypes\n", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in section.splitlines() if line.startswith("|")]
    header, _, *body = rows
    assert [h.split()[0] for h in header[1:4]] == ["Fprop", "Dgrad", "Wgrad"]
    table = {}
    for recipe, *cells in body:
        dtypes = [[DTYPES[d] for d in CELL.fullmatch(c).groups()] for c in cells[:3]]
        table[recipe.strip("`")] = {g: (d[:2], d[2]) for g, d in zip(OUTPUTS, dtypes)}
    return table


def converted(name: str) -> nn.Module:
    """The layer a run of recipe ``name`` trains in a block it quantizes, as ``convert``
    makes it: a QuantLinear, or the nn.Linear of a recipe that quantizes nothing."""
    model = nn.Module()
    model.blocks = nn.ModuleList([nn.Sequential(nn.Linear(IN, OUT, bias=False))])
    recipe = preset(name, high_precision={"first": 0, "last": 0})
    convert(model, recipe, backend=Backend())
    return model.blocks[0][0]


def test_the_gemm_dtype_table_lists_every_recipe():
    assert sorted(documented_gemm_dtypes()) == sorted(PRESETS)


@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float32], ids=["x_bf16", "x_fp32"])
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_recipes_gemms_run_in_the_documented_dtypes(name, x_dtype):
    """One step on the CUDA path; each GEMM found by its output's shape (nn.Linear's backward
    runs Wgrad before Dgrad). The reference backend: every backend is handed the local's
    dtype, and the self-test refuses one that ignores it (test_gemm_dtype.py)."""
    want = documented_gemm_dtypes()[name]
    gemms = linear_step(converted(name), TOKENS, x_dtype).gemms
    by_output = {op.output.shape: op for op in gemms}
    assert len(gemms) == 3 and set(by_output) == set(OUTPUTS.values())
    for gemm, shape in OUTPUTS.items():
        op = by_output[shape]
        assert ([m.dtype for m in op.inputs], op.output.dtype) == want[gemm], gemm


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
