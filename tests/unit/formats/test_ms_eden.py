"""MS-EDEN (``rounding="ms_eden"``, Quartet II): unbiased in expectation over the random
Hadamard signs and the scale's stochastic rounding, where round-to-nearest is not.

The statistic, for N independent draws x_hat_i of an estimator of x (each with its own sign
vector and seed) with mean m and per-draw squared error e_i = ||x_hat_i - x||^2:

    r = N ||m - x||^2 / mean(e_i)

For an unbiased estimator E[N ||m - x||^2] = E[e] (the trace of the covariance), so r is near 1;
it is a sum over the 8192 coordinates, which are correlated within a 128-point group but
independent across the 64 groups, so its spread is at most that of chi^2 with 64 degrees of
freedom over 64: sd <= sqrt(2 / 64) = 0.18. A bias b adds N ||b||^2 / E[e], which grows with N:
round-to-nearest shrinks each group by ~0.45% (measured: r = 3.3 at N = 1000)."""
from __future__ import annotations

import pytest
import torch

from nvfp4_lab.formats import QuantSpec, fake_quantize, quantize
from nvfp4_lab.formats.hadamard import rht_dim
from nvfp4_lab.formats.ms_eden import round_scale_sr
from nvfp4_lab.quant import compiled

DRAWS = 1000


def bias_statistic(rounding: str) -> float:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 128, generator=g)
    spec = QuantSpec("nvfp4", rounding=rounding, rht=128)
    total = torch.zeros_like(x, dtype=torch.float64)
    sq = 0.0
    for i in range(DRAWS):
        signs = (torch.randint(0, 2, (128,), generator=g) * 2 - 1).float()
        x_hat = rht_dim(fake_quantize(x, spec, seed=i, signs=signs), signs, -1, inverse=True)
        total += x_hat.double()
        sq += float(((x_hat.double() - x.double()) ** 2).sum())
    mean = total / DRAWS
    return DRAWS * float(((mean - x.double()) ** 2).sum()) / (sq / DRAWS)


def test_ms_eden_is_unbiased_and_round_to_nearest_is_not():
    assert bias_statistic("ms_eden") < 1 + 3.5 * 0.18
    assert bias_statistic("rne") > 2.0          # the test can tell a biased rounding


def test_scale_rounding_is_stochastic_between_the_e4m3_neighbours():
    """2.1 lies between the E4M3 values 2.0 and 2.25, 0.4 of the way: up with p = 0.4."""
    bits = torch.arange(4096, dtype=torch.int32) << 20          # top 24 bits: u = k / 4096
    s = round_scale_sr(torch.full((4096,), 2.1), bits).float()
    assert set(s.unique().tolist()) == {2.0, 2.25}
    assert float((s == 2.25).float().mean()) == pytest.approx(0.4, abs=1 / 4096)
    exact = round_scale_sr(torch.tensor([2.25, 0.0, 448.0, 600.0]),
                           torch.zeros(4, dtype=torch.int32))
    assert exact.float().tolist() == [2.25, 0.0, 448.0, 448.0]   # on the grid / saturated


def test_a_zero_group_stays_zero_and_compiled_equals_eager():
    x = torch.randn(8, 256)
    x[3] = 0.0
    spec = QuantSpec("nvfp4", rounding="ms_eden", rht=128)
    q = quantize(x, spec, seed=3)
    assert (q.dequantize()[3] == 0).all() and spec.e4m3_limit == 256      # headroom
    assert torch.equal(compiled.fake_quantize(x, spec, seed=3), q.dequantize())
    assert not torch.equal(fake_quantize(x, spec, seed=4), q.dequantize())   # bits matter


@pytest.mark.parametrize("fields,named", [
    ({"rht": None}, "rht=None"), ({"rht": 8}, "rht=8"), ({"fmt": "mxfp4"}, "fmt=mxfp4"),
    ({"block": (16, 16), "rht": None}, "block=(16, 16)"),
])
def test_refused_combinations_name_the_field(fields, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
        QuantSpec(**{"fmt": "nvfp4", "rounding": "ms_eden", "rht": 128, **fields})


def test_a_block_whose_scale_underflows_decodes_to_zero_without_poisoning_its_group():
    """TE's arithmetic gives a block far below the tensor amax the scale 0 and multiplies its
    elements by FLT_MAX: for a group of 1e-10 gradients beside O(1) ones that is ~3e28, whose
    square is inf. Such blocks must stay out of the EDEN sums (else c = inf, and 0 * inf)."""
    x = torch.randn(4, 128)
    x[1] = 1e-10 * torch.randn(128)          # one whole Hadamard group: every s_b is 0
    q = quantize(x, QuantSpec("nvfp4", rounding="ms_eden", rht=128), seed=0)
    assert (q.scales.float()[1] == 0).all() and (q.scales.float()[[0, 2, 3]] > 0).all()
    assert torch.isfinite(q.dequantize()).all() and (q.dequantize()[1] == 0).all()
