"""Stochastic rounding at the layer level: E[dW] over seeds and reproducibility of the bits.

The recipe quantizes only the Wgrad dY operand, so a QuantLinear's weight gradient is
dW = Q(dY)^T X with X exact, and every statistical claim about dW follows from the
per-element law of E2M1 stochastic rounding (``formats/e2m1.py``):

    a scaled magnitude y = lo + f * step between two grid points rounds up with probability
    p = f (exact mode, to 2^-24) or p = floor(256 f) / 256 (hw8), so
    E[q] = lo + p * step  and  Var(q) = p (1 - p) step^2  (<= step^2 / 4).

The operands are built so that those quantities are known in closed form (see ``operands``):
every 16-token block of every dY column holds one element at +-6 C (C = 2^-6) and the
tensor amax is 6 C, so every E4M3 block scale is 448, the encode factor is exactly 1 / C and
the decoded value is q * C up to one fp32 ulp. The other elements sit at fractions
f in [0.25, 0.75] of a random grid interval, where rounding error is large. X is one-hot
along tokens at block granularity (token m feeds only in-feature m // 16), so each element
dW[n, k] = sum over the 16 tokens of block k of Q(dY[m, n]) X[m, k] depends on one
quantization block only, and the NK elements of dW are independent.

The reference values come from float64 arithmetic on the grid, not from the library.
"""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from nvfp4_lab.quant import PRESETS, QuantLinear, QuantState, Recipe

GRID = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
C = 2.0 ** -6          # scale of dY: the tensor amax is 6 C
N, K = 32, 16          # out-features, in-features
M = 16 * K             # tokens: one 16-token block per in-feature
U = 2.0 ** -24


def wgrad_only(rounding: str = "sr", mode: str = "exact") -> Recipe:
    """Quantize only dY of the Wgrad GEMM, 1x16 along tokens, no RHT."""
    return Recipe(format="nvfp4", sr=("wgrad.dy",) if rounding == "sr" else (),
                  quantize=("wgrad.dy",), rht={"gemms": []}, weight_blocks="1d",
                  sr_mode=mode)


def layer_dw(recipe: Recipe, x: torch.Tensor, dy: torch.Tensor, *, seed: int = 0,
             step: int = 0, index: int = 0, slot: int = 0) -> torch.Tensor:
    """dW of a fresh QuantLinear(K -> N) for one forward/backward with upstream gradient dy."""
    lin = nn.Linear(x.shape[1], dy.shape[1], bias=False)
    layer = QuantLinear.from_linear(lin, recipe=recipe, index=index,
                                    state=QuantState(seed=seed, step=step, slot=slot))
    layer(x).backward(dy)
    return lin.weight.grad


def mean_dw(recipe: Recipe, x, dy, seeds) -> torch.Tensor:
    """Mean of dW over the given SR seeds, accumulated in float64."""
    total = torch.zeros(dy.shape[1], x.shape[1], dtype=torch.float64)
    for s in seeds:
        total += layer_dw(recipe, x, dy, seed=s).double()
    return total / len(seeds)


def grid_split(mag: torch.Tensor):
    """float64 magnitudes in [0, 6] -> (lo, step, f) of the E2M1 interval holding them."""
    i = torch.searchsorted(GRID, mag, right=True) - 1
    lo = GRID[i]
    step = GRID[(i + 1).clamp_max(7)] - lo
    f = torch.where(step > 0, (mag - lo) / torch.where(step > 0, step, 1.0), 0.0)
    return lo, step, f


def operands(seed: int, fill: float | None = None, signed: bool = True):
    """X [M, K] (fp32, one-hot blocks along tokens, |values| in [0.5, 1.5]) and
    dY [M, N] (fp32): per 16-token block of each column one element at +-6 C, the rest
    at lo + f step with f = (j + u) / 256, j in [64, 192), u in [0.1, 0.9] (so 256 f is at
    least 0.1 from an integer and hw8's floor is stable), times C. ``fill``: every non-max
    element is +fill * C instead. ``signed=False`` or ``fill``: dY > 0 and X > 0, so that a
    bias of the rounding adds up coherently in dW instead of cancelling."""
    g = torch.Generator().manual_seed(seed)
    if fill is None:
        i = torch.randint(0, 7, (M, N), generator=g)
        j = torch.randint(64, 192, (M, N), generator=g).double()
        u = 0.1 + 0.8 * torch.rand(M, N, generator=g, dtype=torch.float64)
        mag = GRID[i] + (j + u) / 256 * (GRID[i + 1] - GRID[i])
        sign = torch.where(torch.rand(M, N, generator=g) < 0.5, -1.0, 1.0).double()
        if not signed:
            sign = sign.abs()
    else:
        mag = torch.full((M, N), fill, dtype=torch.float64)
        sign = torch.ones(M, N, dtype=torch.float64)
    top = torch.randint(0, 16, (K, N), generator=g)  # position of +-6 in each block
    rows = torch.arange(K)[:, None] * 16 + top       # [K, N] token index
    mag[rows, torch.arange(N)[None, :].expand(K, N)] = 6.0
    dy = (sign * mag * C).float()
    xv = 0.5 + torch.rand(M, generator=g)
    if fill is None and signed:
        xv = xv * torch.where(torch.rand(M, generator=g) < 0.5, -1.0, 1.0)
    x = torch.zeros(M, K)
    x[torch.arange(M), torch.arange(M) // 16] = xv
    return x, dy


def sr_law(dy: torch.Tensor, mode: str):
    """Per dY element: (E[Q(dY)], Var(Q(dY))) in float64 from the grid law above."""
    mag = dy.double().abs() / C  # exact: C is a power of two
    lo, step, f = grid_split(mag)
    p = f if mode == "exact" else torch.floor(256 * f) / 256
    mean = torch.sign(dy.double()) * (lo + p * step) * C
    var = p * (1 - p) * (step * C) ** 2
    assert (var <= (step * C) ** 2 / 4).all()
    return mean, var


def dw_law(x: torch.Tensor, dy: torch.Tensor, mode: str):
    """(E[dW], Var(dW) of one draw) [N, K]: dW[n, k] = sum_m Q(dY[m, n]) X[m, k] with
    independent Q(dY[m, n])."""
    mean, var = sr_law(dy, mode)
    xd = x.double()
    return mean.T @ xd, var.T @ xd ** 2


def deterministic_slack(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """A bound on |E[dW] - law| from fp32 arithmetic, per dW element: exact-mode P(up)
    exceeds f by < 2^-24 (2^-24 step C), the decode factor s_b * fp32(A/2688) is C to one
    ulp (2^-23 relative; allow 2^-21), and the fp32 GEMM's sum of 256 products, of which
    16 are nonzero (adding an exact zero is exact in any order), errs by at most 16 * 2^-24
    of sum |Q| |X| (|Q| <= |dY| + step C <= 2 |dY| + C)."""
    a = (2 * dy.double().abs() + C).T @ x.double().abs()
    return (2 ** -21 + 16 * U) * a + U * C * (2.0 * x.double().abs().sum(0))[None, :]


# --------------------------------------------------------------------------- exact SR

def test_sr_mean_dw_converges_at_the_predicted_rate():
    """mean over n seeds of dW - dY^T X = noise with per-element variance v / n, where
    v = sum_m X[m, k]^2 Var(Q(dY[m, n])) (independent elements, exact SR unbiased).

    E_n^2 = mean over (n, k) of the squared error has expectation P_n^2 = mean(v) / n.
    Its relative sd: each term is (v_i / n) z_i^2 with z_i standardised; z_i is a sum of
    independent two-point variables with p(1 - p) >= 3/16, whose excess kurtosis
    (1 - 6 p (1 - p)) / (p (1 - p)) is negative, so Var(z^2) = 2 + kurtosis <= 2 and
    sd(E_n^2 / P_n^2) <= sqrt(2 sum v^2) / sum v = sqrt(2 / dof), dof = (sum v)^2 / sum v^2
    (~460 here). E_n^2 / P_n^2 is a sum of dof-many independent terms, so we allow 6 sd.
    With T_n = E_n^2 / P_n^2, the ratio for two disjoint seed sets is
    E_n / E_4n = 2 sqrt(T_n / T_4n). log T_n has sd <= sqrt(2 / dof) (delta method), the
    difference of two independent ones sqrt(2) times that, and log(E_n / E_4n) - log 2 is
    half the difference: sd <= sqrt(1 / dof); 5 sd allowed (~[1.6, 2.5] here).

    dY > 0 and X > 0: a rounding bias would add up over the 15 non-max tokens of a block
    instead of cancelling (P(up) = 0.97 f instead of f moves mean z^2 by ~2.5 at n = 256)."""
    x, dy = operands(0, signed=False)
    law, v = dw_law(x, dy, "exact")
    exact = dy.double().T @ x.double()
    assert torch.allclose(law, exact, rtol=0, atol=1e-12)  # exact SR: E[Q(dY)] = dY
    dof = float(v.sum() ** 2 / (v ** 2).sum())
    sd = math.sqrt(2 / dof)
    assert dof > 300
    recipe = wgrad_only("sr", "exact")
    rms, first = {}, 1000
    for n in (16, 64, 256):
        seeds = range(first, first + n)  # disjoint seed sets
        first += n
        err = mean_dw(recipe, x, dy, seeds) - exact
        # the fp32 arithmetic is negligible against the noise (< 1 % of its sd)
        assert (deterministic_slack(x, dy) < 0.01 * (v / n).sqrt()).all()
        ratio2 = float((err ** 2).mean() / (v.mean() / n))
        assert abs(ratio2 - 1) < 6 * sd, (n, ratio2)
        rms[n] = float((err ** 2).mean().sqrt())
    for n in (16, 64):
        shrink = rms[n] / rms[4 * n]
        assert abs(math.log(shrink / 2)) < 5 * math.sqrt(1 / dof), (n, shrink)


def test_rne_bias_is_many_standard_errors_sr_is_not():
    """Every non-max dY element is 1.2 C with X > 0: RNE rounds 1.2 to 1 (bias -0.2 C per
    element, all the same sign), SR rounds up with p = f = 0.4 (fp32(1.2) = 1.2 + 4.8e-8).

    For dW[n, k] over the 15 non-max tokens of block k: RNE error = -0.2 C sum X (exactly
    the same for every seed); SR standard error over n seeds SE = C sqrt(0.24 * 0.25 *
    sum X^2 / n). With X in [0.5, 1.5], sum X / sqrt(sum X^2) >= sqrt(15) * 2 sqrt(3) / 4
    (Polya-Szego with max/min <= 3) = 3.35, so |RNE error| / SE >= 0.2 * 3.35 * sqrt(64)
    / sqrt(0.06) = 21.9 at n = 64. The SR errors are N(0, 1) after standardising: each is a
    sum of 960 Bernoulli(0.4) terms; mean z^2 over 512 elements within 6 sqrt(2/512) of 1,
    and max |z| < 5.5 (P ~ 4e-8 each)."""
    x, dy = operands(1, fill=1.2)
    exact = dy.double().T @ x.double()
    law, v = dw_law(x, dy, "exact")
    n = 64
    se = (v / n).sqrt()

    rne = layer_dw(wgrad_only("rne"), x, dy, seed=0).double()
    assert torch.equal(rne, layer_dw(wgrad_only("rne"), x, dy, seed=7).double())
    z_rne = (rne - exact) / se
    assert (z_rne < -21.9).all(), z_rne.max()
    # and the RNE error is the predicted deterministic bias -0.2 C sum X to fp32 precision
    top = (dy.double().abs() == 6 * C).double()
    bias = -(dy.double().abs() / C - 1.0) * C * (1 - top)  # [M, N] per-element RNE error
    assert torch.allclose(rne - exact, bias.T @ x.double(), rtol=1e-5, atol=1e-9)

    sr = mean_dw(wgrad_only("sr", "exact"), x, dy, range(100, 100 + n))
    assert torch.allclose(law, exact, rtol=0, atol=1e-12)
    z_sr = (sr - exact) / se
    assert abs(float((z_sr ** 2).mean()) - 1) < 6 * math.sqrt(2 / z_sr.numel())
    assert z_sr.abs().max() < 5.5
    assert (deterministic_slack(x, dy) < 0.01 * se).all()


# --------------------------------------------------------------------------- hw8

def test_hw8_mean_error_is_its_floor_bias_plus_noise():
    """hw8 rounds up with p = floor(256 f) / 256 <= f: toward zero by (f - p) step < step/256.

    So E[dW] - dY^T X = sum_m -sign(dY) (f - p) step C X[m, k], bounded in magnitude by
    B = sum_m step C |X[m, k]| / 256; the noise of the mean over n seeds has variance v / n
    with v from p. Checked: (1) the mean error against dY^T X stays within B + 5.5 SE for
    every element; (2) against the hw8 law itself the standardised errors have mean square
    1 within 6 sqrt(2/512) (same argument as the exact-mode test: p in [0.25, 0.75])."""
    x, dy = operands(2)
    law, v = dw_law(x, dy, "hw8")
    exact = dy.double().T @ x.double()
    _, step, _ = grid_split(dy.double().abs() / C)
    b = (step * C).T @ x.double().abs() / 256
    assert ((law - exact).abs() <= b + 1e-12).all()
    assert (b > 0).all()

    n = 128
    se = (v / n).sqrt()
    hw8 = mean_dw(wgrad_only("sr", "hw8"), x, dy, range(5000, 5000 + n))
    slack = deterministic_slack(x, dy)
    assert (slack < 0.01 * se).all()
    assert ((hw8 - exact).abs() <= b + 5.5 * se + slack).all()
    z = (hw8 - law) / se
    assert abs(float((z ** 2).mean()) - 1) < 6 * math.sqrt(2 / z.numel())


def test_hw8_below_its_first_threshold_is_deterministic_and_biased():
    """The random test above cannot tell hw8 from exact SR (the bias, < step/256 per element,
    is far below the noise). Below the first threshold it can: every non-max dY element is
    (1 + 1/1024) C, i.e. lo = 1, step = 0.5, f = 1/512, so floor(256 f) = 0 and hw8 never
    rounds up. dW is then the same for every seed and equals the floor law exactly:
    dY^T X - f step C sum X over the 15 non-max tokens (up to fp32 rounding). Exact SR rounds
    up with p = 1/512: over 7680 such elements per seed it does, P(no up) = e^-15."""
    x, dy = operands(3, fill=1 + 1 / 1024)
    law, var = dw_law(x, dy, "hw8")
    assert (var == 0).all()
    exact = dy.double().T @ x.double()
    hw8 = [layer_dw(wgrad_only("sr", "hw8"), x, dy, seed=s).double() for s in range(3)]
    assert torch.equal(hw8[0], hw8[1]) and torch.equal(hw8[0], hw8[2])
    assert (hw8[0] - law).abs().max() < 1e-6 * law.abs().max()
    non_max = (dy.double().abs() != 6 * C).double()
    bias = -(1 / 1024) * C * (non_max.T @ x.double())
    assert torch.allclose(law - exact, bias, rtol=1e-9, atol=0)
    assert ((hw8[0] - exact) < 0.5 * bias).all()  # visibly biased (bias < 0)
    ex = [layer_dw(wgrad_only("sr", "exact"), x, dy, seed=s) for s in range(2)]
    assert not torch.equal(ex[0], ex[1])


# --------------------------------------------------------------------------- reproducibility

def _random_operands(seed: int = 3):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(64, 32, generator=g), torch.randn(64, 16, generator=g)


@pytest.mark.parametrize("recipe", [wgrad_only("sr", "exact"), wgrad_only("sr", "hw8"),
                                    PRESETS["nvfp4"]], ids=["exact", "hw8", "nvfp4"])
def test_sr_bits_are_keyed_by_seed_step_layer_and_slot(recipe):
    """Same (seed, step, layer, slot) -> bit-identical dW from two fresh layers;
    changing any one of them changes the SR bits, hence dW (64 x 16 random dY: thousands of
    rounding decisions, so equality by chance is impossible)."""
    x, dy = _random_operands()
    base = layer_dw(recipe, x, dy, seed=1, step=5, index=2, slot=0)
    assert torch.equal(base, layer_dw(recipe, x, dy, seed=1, step=5, index=2, slot=0))
    for change in ({"seed": 2}, {"step": 6}, {"index": 3}, {"slot": 1}):
        kw = {"seed": 1, "step": 5, "index": 2, "slot": 0} | change
        assert not torch.equal(base, layer_dw(recipe, x, dy, **kw)), change


def test_rne_dw_ignores_seed_step_and_layer():
    """The control: with RNE on dY nothing random is left, so dW cannot depend on the ids."""
    x, dy = _random_operands()
    base = layer_dw(wgrad_only("rne"), x, dy, seed=1, step=5, index=2)
    for kw in ({"seed": 2, "step": 5, "index": 2}, {"seed": 1, "step": 6, "index": 2},
               {"seed": 1, "step": 5, "index": 3}):
        assert torch.equal(base, layer_dw(wgrad_only("rne"), x, dy, **kw)), kw
