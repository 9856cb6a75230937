"""quant/stats.py on hand-built tensors with known answers, and QuantLinear's statistics.

NVFP4 arithmetic used for the known answers (``formats/nvfp4.py``): with tensor amax A,
S_enc = 2688 / A, block scale s_b = e4m3(a_b * S_enc / 6), encode factor
1 / (s_b * A / 2688), decode (q * s_b) * A / 2688. With A = 2688 * 2^j every global factor
is a power of two, so a block whose amax is 6 s (s an E4M3 number) gets s_b = s and decodes
exactly, and a block whose amax 6 r is not 6 x an E4M3 number gets s_b = e4m3(r): when that
rounds down the block max lands at 6 r / s_b > 6 and is clipped to 6 s_b < 6 r.
E4M3 (fn): 3 mantissa bits, smallest normal 2^-6, subnormals down to 2^-9, below 2^-10 -> 0.
"""
from __future__ import annotations

import math

import pytest
import torch
from helpers.tiny_model import TinyLM, lm_loss
from torch import nn

from nvfp4_lab.formats import QuantSpec, Stream, fake_quantize, quantize
from nvfp4_lab.formats.hadamard import rht, sign_vector
from nvfp4_lab.quant import (
    PRESETS,
    Backend,
    QuantLinear,
    QuantState,
    Recipe,
    convert,
    layer_stats,
    preset,
    quant_state,
)
from nvfp4_lab.quant.stats import operand_stats, rel_err

GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
NVFP4 = QuantSpec("nvfp4", block=(1, 16))
STATS = ("top_bin", "clipped", "underflow", "rel_err", "scale_underflow")


def fp32_fraction(count: int, total: int) -> float:
    """count / total as the fp32 mean of a 0/1 tensor gives it (sum exact, one rounding)."""
    return float(torch.tensor(count / total, dtype=torch.float32))


def e4m3_nearest(r: float) -> float:
    """Nearest normal E4M3 value to r in [2^-6, 448], ties to even (independent of torch)."""
    spacing = 2.0 ** (math.floor(math.log2(r)) - 3)
    return round(r / spacing) * spacing  # Python round: half to even


# --------------------------------------------------------------------------- top_bin

def test_top_bin_counts_one_element_per_nonzero_block():
    """Every block has one element at its max and the rest at <= half of it. The max lands
    on 6 whatever the E4M3 rounding of its scale (6 r / e4m3(r) > 6 / (1 + 2^-4) = 5.65 > 5
    rounds to 6 under RNE, or is clipped to 6); the rest stay <= 0.5 * 6 * (1 + 2^-4) < 3.5.
    Block maxima span 1e-3..1 of the tensor amax (E4M3 scales >= 0.448: normal). An all-zero
    block has no top element; the 40-wide last dim leaves a padded partial block."""
    g = torch.Generator().manual_seed(0)
    rows, width = 6, 40
    x = (torch.rand(rows, width, generator=g) - 0.5)  # |x| <= 0.5
    live = 0
    for r in range(rows):
        for start in range(0, width, 16):
            end = min(start + 16, width)
            if (r, start) == (2, 16):
                x[r, start:end] = 0.0
                continue
            amax = 10.0 ** (-3 * torch.rand(1, generator=g).item())
            x[r, start:end] *= amax
            pos = start + int(torch.randint(0, end - start, (1,), generator=g))
            x[r, pos] = amax if pos % 2 else -amax
            live += 1
    s = operand_stats(x, NVFP4)
    assert s["top_bin"] == fp32_fraction(live, x.numel())
    # along axis 0 the same check on x.T
    assert operand_stats(x.T.contiguous(), QuantSpec("nvfp4", block=(1, 16), axis=0)
                         )["top_bin"] == fp32_fraction(live, x.numel())


# --------------------------------------------------------------------------- underflow

def test_underflow_counts_nonzero_inputs_that_decode_to_zero():
    """A = 6: S_enc = 448; a block with amax 6 gets s_b = 448 and encode factor 1
    (448 * fp32(1/448) = 1 in fp32), so y = x: +-1e-3 <= 0.25 -> 0 (underflow), 1 -> 1.
    A block with amax 3 gets s_b = 224 and factor 2: 0.1 -> 0.2 -> 0, 0.15 -> 0.3 -> 0.5.
    Zero inputs are not in the denominator, an all-zero block contributes nothing.

        row 0, block 0: 6 and 15 x +-1e-3       16 nonzero, 15 underflow
        row 0, block 1: 6, 7 zeros, 8 x 1.0      9 nonzero,  0 underflow
        row 1, block 0: all zero                 0
        row 1, block 1: 3, 3 x 0.1, 3 x -0.15    7 nonzero,  3 underflow
    """
    x = torch.zeros(2, 32)
    x[0, 0] = 6.0
    x[0, 1:16] = torch.tensor([1e-3, -1e-3] * 7 + [1e-3])
    x[0, 16] = 6.0
    x[0, 24:32] = 1.0
    x[1, 16] = 3.0
    x[1, 17:20] = 0.1
    x[1, 20:23] = -0.15
    s = operand_stats(x, NVFP4)
    assert s["underflow"] == fp32_fraction(18, 32)
    assert s["scale_underflow"] == 0.0
    assert s["clipped"] == 0.0
    deq = quantize(x, NVFP4).dequantize()
    assert (deq[0, 1:16] == 0).all() and (deq[1, 17:20] == 0).all()
    assert torch.allclose(deq[1, 20:23], torch.tensor(-0.25), rtol=1e-6, atol=0)


# --------------------------------------------------------------------------- scale_underflow

def test_scale_underflow_subnormal_and_zero_e4m3_scales():
    """A = 6 (S_enc = 448): s = 448 a_b / 6 = 74.67 a_b.

        block 0: amax 6                 s = 448                 normal
        block 1: amax 1                 s = 74.67 -> 72         normal (spacing 8)
        block 2: amax 1e-4 (~2e-5 A)    s = 7.5e-3 in [2^-10, 2^-6): subnormal  -> counted
        block 3: amax 6e-7 (1e-7 A)     s = 4.5e-5 < 2^-10: rounds to 0         -> counted
        block 4: all zero               not a live block: not counted
    so scale_underflow = 2 / 4. Block 3 decodes to zero (its elements underflow)."""
    x = torch.zeros(1, 80)
    for b, amax in enumerate([6.0, 1.0, 1e-4, 6e-7]):
        x[0, 16 * b:16 * b + 8] = torch.linspace(amax / 8, amax, 8)
    s = operand_stats(x, NVFP4)
    assert s["scale_underflow"] == 0.5
    scales = quantize(x, NVFP4).scales.float()[0]
    assert scales[0] == 448 and scales[1] == 72
    assert 2.0 ** -9 <= scales[2] < 2.0 ** -6 and scales[3] == 0 and scales[4] == 0
    # the zero-scale block decodes to 0: its 8 elements, out of 32 nonzero, underflow; the
    # subnormal one keeps its max (3 significant bits are enough for that)
    deq = quantize(x, NVFP4).dequantize()[0]
    assert (deq[48:56] == 0).all()
    assert s["underflow"] >= fp32_fraction(8, 32)


def test_zero_scale_block_is_underflow_not_top_bin_or_clipped():
    x = torch.zeros(1, 32)
    x[0, :16] = torch.linspace(0.4, 6.0, 16)  # RNE: 5.25, 5.63 and 6 (all > 5) land on 6
    x[0, 16:20] = torch.tensor([6e-7, 3e-7, -3e-7, 1e-7])  # scale 4.5e-5 -> E4M3 0
    s = operand_stats(x, NVFP4)
    assert s["underflow"] == fp32_fraction(4, 20)
    assert s["scale_underflow"] == 0.5
    assert s["top_bin"] == fp32_fraction(3, 32)
    assert s["clipped"] == 0.0


def test_mxfp4_scale_underflow_and_floor_clipping():
    """MXFP4 1x32. floor mode: k = floor(log2 a) - 2 puts a / 2^k in [4, 8), so a block max
    whose mantissa a / 2^floor(log2 a) exceeds 1.5 saturates at 6 * 2^k < a:
    amaxes 7 (1.75), 7.9 (1.975), 14 (1.75) clip; 6 (1.5), 4, 12 (1.5) do not.
    ceil mode (the default) never clips. A block with amax 1e-39 (a / 6 below 2^-127) gets
    the smallest E8M0 scale 2^-127: scale_underflow; an all-zero block is not counted."""
    amaxes = [7.0, 6.0, 4.0, 7.9, 12.0, 14.0]
    x = torch.zeros(len(amaxes) + 2, 32)
    for i, a in enumerate(amaxes):
        x[i, :7] = torch.linspace(a / 8, a / 2, 7)  # the rest of the block: <= half the max
        x[i, 7] = a
    x[len(amaxes), :4] = 1e-39
    floor = operand_stats(x, QuantSpec("mxfp4", block=(1, 32), mx_scale="floor"))
    assert floor["clipped"] == fp32_fraction(3, x.numel())
    ceil = operand_stats(x, QuantSpec("mxfp4", block=(1, 32)))
    assert ceil["clipped"] == 0.0
    assert ceil["scale_underflow"] == fp32_fraction(1, len(amaxes) + 1)


# --------------------------------------------------------------------------- rel_err, clipped

def representable(j: int, seed: int = 0) -> tuple[torch.Tensor, int]:
    """[4, 64] fp32 of E2M1 values q times per-block E4M3 scales s times 2^j, each block
    with one +-6 and one block with s = 448 (so A = 2688 * 2^j). Returns (x, #|q| == 6)."""
    g = torch.Generator().manual_seed(seed)
    scales = [448.0, 1.25, 0.0625, 3.5, 96.0, 0.5, 13.0, 240.0, 2.0 ** -6, 0.875, 2.0,
              26.0, 0.3125, 52.0, 7.5, 1.0]
    q = torch.tensor(GRID)[torch.randint(0, 8, (4, 64), generator=g)]
    q = q * torch.where(torch.rand(4, 64, generator=g) < 0.5, -1.0, 1.0)
    qb = q.view(4, 4, 16)
    qb[:, :, 0] = 6.0 * torch.where(torch.rand(4, 4, generator=g) < 0.5, -1.0, 1.0)
    s = torch.tensor(scales).view(4, 4, 1)
    return (qb * s * 2.0 ** j).view(4, 64), int((q.abs() == 6).sum())


@pytest.mark.parametrize("j", [0, -12, 7])
def test_exactly_representable_input_has_no_error(j):
    """A = 2688 * 2^j: S_enc, S_dec and A / 2688 are powers of two, s_b = e4m3(s (1 + e))
    = s, the encode factor fp32(1 / (s 2^j)) gives y = q (1 +- 2 ulp), which RNE returns to
    q (grid points are not ties), and (q * s) * 2^j is exact: rel_err == 0, nothing clips,
    nothing underflows (zeros are zero inputs), no scale is subnormal, and the top bin
    holds exactly the +-6 elements."""
    x, n_top = representable(j)
    assert torch.equal(quantize(x, NVFP4).dequantize(), x)
    s = operand_stats(x, NVFP4)
    assert s["rel_err"] == 0.0
    assert s["clipped"] == 0.0
    assert s["underflow"] == 0.0
    assert s["scale_underflow"] == 0.0
    assert s["top_bin"] == fp32_fraction(n_top, x.numel())


def test_clipped_counts_block_maxima_whose_scale_rounds_down():
    """A = 2688 (one block holds it, scale exactly 448). 24 other blocks have maxima 6 r
    with r drawn log-uniformly in [2^-5, 400] (fixed seed), at least 1 % of an E4M3 spacing
    away from a rounding midpoint; their other elements are <= 0.5 * 6 r. s_b = e4m3(r):
    the max decodes to exactly 6 s_b (A / 2688 = 1), above 6 r when r rounded up, below
    (clipped) when it rounded down. clipped = #down / numel, counted independently with
    e4m3_nearest; the exactly representable tensor of the previous test clips nothing."""
    g = torch.Generator().manual_seed(5)
    rs = []
    while len(rs) < 24:
        r = float(torch.tensor(2.0 ** (-5 + 13.6 * torch.rand(1, generator=g).item()),
                               dtype=torch.float32))
        spacing = 2.0 ** (math.floor(math.log2(r)) - 3)
        if abs((r / spacing) % 1 - 0.5) > 0.01 and r / spacing % 1 != 0:
            rs.append(r)
    x = (torch.rand(25, 16, generator=g) - 0.5)  # |x| <= 0.5
    x[0] *= 2688.0
    x[0, 3] = 2688.0
    for i, r in enumerate(rs, start=1):
        x[i] *= 6 * r
        x[i, i % 16] = -6 * r if i % 3 else 6 * r
    down = [e4m3_nearest(r) < r for r in rs]
    assert 0 < sum(down) < len(rs)  # both kinds present
    s = operand_stats(x, NVFP4)
    assert s["clipped"] == fp32_fraction(sum(down), x.numel())
    deq = quantize(x, NVFP4).dequantize()
    for i, r in enumerate(rs, start=1):
        assert deq[i, i % 16].abs() == 6 * e4m3_nearest(r), r
    assert operand_stats(representable(0)[0], NVFP4)["clipped"] == 0.0


# --------------------------------------------------------------------------- RHT

@pytest.mark.parametrize("rounding", ["rne", "sr"])
def test_rht_stats_are_taken_in_the_rotated_space(rounding):
    """With an RHT the quantizer sees xr = x R (rounded to fp32) and the stored tensor is
    Q(xr). The stats of (x, spec with RHT) must be those of (xr, the same spec without it):
    identical tensors, identical SR bits (indexed by the element position, the same in x and
    xr). rel_err is ||Q(xr) - xr|| / ||xr||, which R's orthogonality makes equal (to fp32
    rounding) to ||Q(xr) R^T - x|| / ||x||, and far from the meaningless ||Q(xr) - x||."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(64, 32, generator=g) * torch.exp(torch.randn(64, 1, generator=g))
    x[5, 3] = 40.0  # an outlier for the transform to spread
    signs = sign_vector(16, "per_call", seed=3, layer=1, step=2, call=1)
    spec = QuantSpec("nvfp4", block=(1, 16), axis=0, rht=16, rounding=rounding,
                     sr_mode="exact")
    plain = QuantSpec("nvfp4", block=(1, 16), axis=0, rounding=rounding, sr_mode="exact")
    kw = {"seed": 4, "stream": Stream(layer=1, step=2)}
    xr = rht(x, 16, axis=0, signs=signs)
    got = operand_stats(x, spec, signs=signs, **kw)
    assert got == operand_stats(xr, plain, **kw)

    deq = quantize(x, spec, signs=signs, **kw).dequantize().double()
    expect = float((deq - xr.double()).norm() / xr.double().norm())
    assert got["rel_err"] == pytest.approx(expect, rel=1e-5)
    back = rht(deq.float(), 16, axis=0, signs=signs, inverse=True).double()
    assert got["rel_err"] == pytest.approx(float((back - x).norm() / x.norm()), rel=1e-4)
    assert float((deq - x.double()).norm() / x.norm()) > 0.5
    assert 0 < got["rel_err"] < 0.2


def test_rel_err_helper():
    assert rel_err(torch.zeros(3), torch.zeros(3)) == 0.0
    assert rel_err(torch.ones(3), torch.zeros(3)) == pytest.approx(math.sqrt(3))
    assert rel_err(torch.tensor([3.0, 4.0]), torch.tensor([0.0, 4.0])) == 0.75
    assert rel_err(torch.tensor([1.0], dtype=torch.bfloat16), torch.tensor([2.0])) == 0.5


# --------------------------------------------------------------------------- QuantLinear

def run_layer(recipe: Recipe, collect: bool, *, seed: int = 0, tokens: int = 64,
              k: int = 64, n: int = 32):
    """One forward + backward of a QuantLinear(k -> n); returns (layer, y, dx, dW, x, dy)."""
    g = torch.Generator().manual_seed(11)
    lin = nn.Linear(k, n, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(n, k, generator=g) / math.sqrt(k))
    layer = QuantLinear.from_linear(lin, recipe=recipe,
                                    state=QuantState(seed=seed, step=3, collect_stats=collect))
    x = torch.randn(tokens, k, generator=g).requires_grad_()
    dy = torch.randn(tokens, n, generator=g) * 1e-3
    y = layer(x)
    y.backward(dy)
    return layer, y.detach(), x.grad, lin.weight.grad, x.detach(), dy


def quantized_operands(recipe: Recipe) -> list[str]:
    return [op for op, o in QuantLinear(16, 16, recipe=recipe).plan.items() if o.spec]


def test_nvfp4_preset_fills_every_statistic():
    layer, *_ = run_layer(PRESETS["nvfp4"], collect=True)
    ops = quantized_operands(PRESETS["nvfp4"])
    # 2D weights: dgrad.w reuses fprop.w's quantization and has no statistics of its own
    assert ops == ["fprop.x", "fprop.w", "dgrad.dy", "wgrad.dy", "wgrad.x"]
    expected = ({(op, k) for op in ops for k in STATS} | {("wgrad", "rel_err")}
                | {(src, "noise_ratio") for src in ("dgrad.dy", "wgrad.dy", "wgrad")})
    assert set(layer.stats) == expected
    for key, v in layer.stats.items():
        assert isinstance(v, float) and math.isfinite(v), key
        if key[1] not in ("rel_err", "noise_ratio"):
            assert 0.0 <= v <= 1.0, key
    assert layer.stats["wgrad.dy", "top_bin"] > 0  # every live block has its max on 6
    for op in ops:
        assert 0 < layer.stats[op, "rel_err"] < 0.5, op
    assert 0 < layer.stats["wgrad", "rel_err"] < 1.0


def test_stats_are_empty_without_collect_stats():
    layer, *_ = run_layer(PRESETS["nvfp4"], collect=False)
    assert layer.stats == {}


@pytest.mark.parametrize("rht_gemms", [[], ["wgrad"]])
def test_wgrad_rel_err_is_zero_when_wgrad_is_not_quantized(rht_gemms):
    """Only Fprop quantized: dW = dY^T X is nn.Linear's FP32 product, so the error against
    the unquantized product is exactly 0. With an (unquantized) RHT on Wgrad the operands
    are rotated and rounded to fp32, dW = (R^T dY)^T (R^T X) equals dY^T X up to fp32
    rounding: relative error ~1e-7. Only the forward operands have statistics."""
    recipe = Recipe(format="nvfp4", quantize=("forward",), sr=(), weight_blocks="1d",
                    rht={"gemms": rht_gemms})
    layer, _, _, dw, x, dy = run_layer(recipe, collect=True)
    forward = {(op, k) for op in ("fprop.x", "fprop.w") for k in STATS} | {("wgrad", "rel_err")}
    if rht_gemms:     # fp32 rounding noise only: a huge ratio, logged
        assert set(layer.stats) == forward | {("wgrad", "noise_ratio")}
        assert 0 <= layer.stats["wgrad", "rel_err"] < 1e-5
        assert layer.stats["wgrad", "noise_ratio"] > 1e5
    else:             # no noise at all: no ratio to log
        assert set(layer.stats) == forward and layer.stats["wgrad", "rel_err"] == 0.0
    assert (dw - dy.t() @ x).abs().max() < 1e-5 * dw.abs().max()


def test_stats_describe_the_operands_the_gemm_used():
    """Wgrad dY alone quantized, SR: the statistics quantize dY a second time and must draw
    the same bits as the GEMM. The GEMM's dW equals Q(dY)^T X for Q from the layer's own
    stream, the recorded rel_err of wgrad.dy is rel_err(Q, dY), and wgrad/rel_err is the
    error of that dW against dY^T X. A different seed gives a different rel_err (so the
    match is not a coincidence)."""
    recipe = Recipe(format="nvfp4", sr=("wgrad.dy",), quantize=("wgrad.dy",),
                    rht={"gemms": []}, weight_blocks="1d", sr_mode="exact")
    layer, _, _, dw, x, dy = run_layer(recipe, collect=True, seed=9)
    spec = layer.plan["wgrad.dy"].spec
    q = fake_quantize(dy, spec, seed=9, stream=layer.stream("wgrad.dy"))
    # the same product up to the order of fp32 sums (the GEMM applies A/2688 at the end)
    assert (dw - q.t() @ x).abs().max() < 1e-5 * dw.abs().max()
    assert layer.stats["wgrad.dy", "rel_err"] == pytest.approx(rel_err(q, dy), rel=1e-6)
    assert layer.stats["wgrad", "rel_err"] == pytest.approx(rel_err(dw, dy.t() @ x), rel=1e-6)
    other = fake_quantize(dy, spec, seed=10, stream=layer.stream("wgrad.dy"))
    assert rel_err(other, dy) != pytest.approx(rel_err(q, dy), rel=1e-6)
    assert set(layer.stats) == ({("wgrad.dy", k) for k in STATS}
                                | {("wgrad", "rel_err"), ("wgrad.dy", "noise_ratio"),
                                   ("wgrad", "noise_ratio")})


@pytest.mark.parametrize("name", ["nvfp4", "nvfp4_base", "mxfp4"])
def test_collecting_stats_changes_no_output_or_gradient(name):
    """The statistics re-quantize with the same seed and stream but must not feed back:
    y, dX and dW are bit-identical with and without them."""
    on = run_layer(PRESETS[name], collect=True)
    off = run_layer(PRESETS[name], collect=False)
    assert on[0].stats and not off[0].stats
    for a, b in zip(on[1:4], off[1:4]):
        assert torch.equal(a, b)


def test_layer_stats_collects_per_layer_names_and_clears():
    """layer_stats(model): '<layer>/<operand>/<metric>' for every converted layer, then empty."""
    torch.manual_seed(0)
    model = TinyLM(d=64, n_blocks=2)
    report = convert(model, preset("nvfp4_base"), backend=Backend())
    quant_state(model).collect_stats = True
    lm_loss(model, torch.randint(0, 64, (2, 33))).backward()
    stats = layer_stats(model)
    layers = {k.rsplit("/", 2)[0] for k in stats}
    assert layers == set(report.quantized)
    assert stats["blocks.1.fc2/wgrad/rel_err"] > 0
    assert layer_stats(model) == {}


def test_noise_ratio_is_the_gradient_norm_over_its_quantization_noise():
    """FP4-All-the-Way's diagnostic, by hand: ||dY^T X|| / ||dW - dY^T X|| for the weight
    gradient the layer produced, and ||g|| / ||Q(g) - g|| = 1 / rel_err per gradient operand."""
    layer, _, _, dw, x, dy = run_layer(PRESETS["nvfp4"], collect=True)
    exact = dy.double().t() @ x.double()
    want = float(exact.norm() / (dw.double() - exact).norm())
    assert layer.stats["wgrad", "noise_ratio"] == pytest.approx(want, rel=1e-4)
    for op in ("dgrad.dy", "wgrad.dy"):
        assert layer.stats[op, "noise_ratio"] * layer.stats[op, "rel_err"] == pytest.approx(
            1.0, rel=1e-5)
    assert not any(src in ("fprop.x", "fprop.w", "wgrad.x") and metric == "noise_ratio"
                   for src, metric in layer.stats)
