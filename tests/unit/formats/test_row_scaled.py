"""Row-scaled NVFP4 (``amax="row"``, TE's ``row_scaled_nvfp4``): one FP32 amax per row.

Byte equality with the independent transcriptions (te_reference.py and
four_over_six_reference.py, their ``rows`` variant: "A is a per-row vector; everything else
per row") on rows built to hit the edges: all-zero rows, rows of subnormal-scale magnitudes
next to huge ones, -0.0, ties; fp32 and bf16; both TE orderings and 4/6. Then the GEMM: the
output row i is scaled by A_x[i] A_w / 2688^2, which TE's qgemm computes the same way."""
from __future__ import annotations

import pytest
import torch
from helpers.four_over_six_reference import four_over_six_reference
from helpers.te_reference import te_dequantize, te_nvfp4_reference, te_qgemm

from nvfp4_lab.formats import QuantSpec, fake_quantize, fake_quantize_parts, quantize
from nvfp4_lab.quant import compiled
from nvfp4_lab.quant.gemm import Parts, gemm


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def rows_tensor(seed: int, dtype=torch.float32) -> torch.Tensor:
    """[48, 64]: row magnitudes over 2^-140 .. 2^120, a zero row, ties, -0.0."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(48, 64, generator=g)
    x = x * torch.exp2(torch.randint(-140, 120, (48, 1), generator=g).float())
    x[0] = 0.0                                                     # a row of zeros
    x[1, :16] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] * 2)  # E2M1 ties
    x[2, :] = -0.0
    x[3, 16:32] = 0.0                                              # a zero block in a live row
    x[4] = x[4] * 1e-6                                             # tiny row
    return x.to(dtype)


@pytest.mark.parametrize("order", ["te", "te_v2_8"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bytes_equal_the_transcription(order, dtype):
    for seed in range(4):
        x = rows_tensor(seed, dtype)
        q = quantize(x, "nvfp4", order=order, amax="row")
        codes, scales, amax = te_nvfp4_reference(x, order, rows=True)
        assert torch.equal(q.codes(), codes)
        assert torch.equal(bits(q.scales), bits(scales))
        assert q.amax.shape == (48, 1) and torch.equal(bits(q.amax), bits(amax))
        want = te_dequantize(codes, scales, amax)
        assert torch.equal(bits(q.dequantize()), bits(want))
        assert torch.equal(bits(fake_quantize(x.float(), "nvfp4", order=order, amax="row")),
                           bits(want))


@pytest.mark.parametrize("error", ["mae", "mse"])
def test_with_4over6_bytes_equal_the_transcription(error):
    for seed in range(4):
        x = rows_tensor(seed)
        q = quantize(x, "nvfp4", amax="row", four_over_six=error)
        codes, scales, amax = four_over_six_reference(x, error, rows=True)
        assert torch.equal(q.codes(), codes) and torch.equal(bits(q.scales), bits(scales))
        assert torch.equal(bits(q.amax), bits(amax))


def test_a_small_row_keeps_its_precision_beside_a_huge_one():
    """What row scaling is for: under one tensor amax a row 2^-20 below the largest has its
    block scales in E4M3's subnormals or at 0; with its own amax it quantizes as if alone."""
    x = torch.randn(2, 64)
    x[1] *= 2.0 ** 20
    row = quantize(x, "nvfp4", amax="row").dequantize()[0]
    alone = quantize(x[:1], "nvfp4").dequantize()[0]
    shared = quantize(x, "nvfp4").dequantize()[0]
    assert torch.equal(row, alone) and not torch.equal(shared, alone)


def test_3d_inputs_have_one_amax_per_token():
    x = rows_tensor(0).reshape(4, 12, 64)
    q = quantize(x, "nvfp4", amax="row")
    assert q.amax.shape == (4, 12, 1)
    assert torch.equal(bits(q.amax.reshape(48, 1)),
                       bits(te_nvfp4_reference(x.reshape(48, 64), rows=True)[2]))


def test_compiled_equals_eager():
    x = rows_tensor(2)
    spec = QuantSpec("nvfp4", amax="row")
    (le, ae), (lc, ac) = fake_quantize_parts(x, spec), compiled.fake_quantize_parts(x, spec)
    assert torch.equal(bits(lc), bits(le)) and torch.equal(bits(ac), bits(ae))


def test_gemm_scales_each_output_row_by_its_amax():
    """K = 16: partial sums are exact, so the emulated GEMM equals TE's qgemm bit for bit."""
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(32, 16, generator=g) * torch.exp2(torch.randint(-30, 30, (32, 1),
                                                                          generator=g).float())
        w = torch.randn(24, 16, generator=g)
        lx, ax = fake_quantize_parts(x, "nvfp4", amax="row")
        lw, aw = fake_quantize_parts(w, "nvfp4")
        y = gemm(Parts(lx, ax, True), Parts(lw, aw, True).T, torch.float32)
        cx, sx, rx = te_nvfp4_reference(x, rows=True)
        cw, sw, rw = te_nvfp4_reference(w)
        assert torch.equal(bits(y), bits(te_qgemm(cx, sx, rx, cw, sw, rw))), seed


@pytest.mark.parametrize("fields,named", [
    ({"fmt": "mxfp4"}, "fmt=mxfp4"), ({"block": (16, 16)}, "block=(16, 16)"),
    ({"axis": 0}, "axis=0"), ({"rounding": "sr"}, "rounding=sr"), ({"rht": 16}, "rht=16"),
    ({"order": "torchao"}, "order=torchao"), ({"amax": "col"}, "amax='col'"),
])
def test_refused_combinations_name_the_field(fields, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
        QuantSpec(**{"fmt": "nvfp4", "amax": "row", **fields})
