"""The steps-or-size study's power, as pre-registered (results/preregistration.md, Steps or
size): simulated studies of its six cells under each reading, read with its rule.

    python notebooks/steps_vs_size_power.py      # a few minutes on one core

Per-seed relative gaps (percent) are drawn normal around a reading's cell means with a stated
sd per cell; the exponent c of gap = k_size (S / S_2048)^c is fitted by weighted least squares
(weights n / s^2 of each cell) on a grid of c, and its 95% percentile interval comes from
refits on seed resamples, as the study's analysis does.
"""
import numpy as np

C = np.linspace(-3, 3, 1201)
STEPS = np.array([[7228, 1807, 452], [1814, 454, 114]], float)    # w64, w32 at D/N 20
X = np.log(STEPS / STEPS[:, 1:2])
N = np.array([185_024, 46_432.0])[:, None]
B_GRID = -0.362                # the scaling study's relative b, read as a steps exponent


def fit_c(g, w):
    """c minimising the weighted squared error of g = k_size exp(c x), k solved per c."""
    e = np.exp(C[:, None, None] * X[None])
    k = np.einsum("...sj,csj->...cs", g * w, e) / np.einsum("...sj,csj->...cs", w, e**2)
    sse = (w[..., None, :, :] * (g[..., None, :, :] - k[..., None] * e) ** 2).sum((-1, -2))
    return C[sse.argmin(-1)]


def interval(seeds, resamples, rng):
    """95% percentile interval of c over seed resamples (deviations inflated)."""
    n = seeds.shape[-1]
    m = seeds.mean(-1, keepdims=True)
    infl = m + (seeds - m) * np.sqrt(n / (n - 1))
    idx = rng.integers(0, n, size=(resamples,) + seeds.shape)
    res = np.take_along_axis(np.broadcast_to(infl, idx.shape), idx, -1)
    cs = fit_c(res.mean(-1), n / res.var(-1, ddof=1).clip(1e-9))
    return np.quantile(cs, [0.025, 0.975])


def reading(lo, hi):
    if lo > 0:
        return "batch noise"
    if hi < B_GRID:
        return "beyond steps"
    if lo <= B_GRID <= hi and hi < 0:
        return "steps"
    if lo <= 0 <= hi and lo > B_GRID:
        return "size"
    if B_GRID < lo and hi < 0:
        return "between"
    return "not resolved"


def main(studies=200, resamples=1000):
    g64 = 3.17                                     # the grid's w64 cell at D/N 20, 1807 steps
    size = g64 * (N / N[0]) ** B_GRID * np.ones((2, 3))
    truths = {"size": size, "steps": g64 * (STEPS / 1807) ** B_GRID,
              "batch noise": size * (0.5 + 0.5 * STEPS / STEPS[:, 1:2])}
    sds = {"conservative": np.array([[2.0, 2.0, 2.0], [3.0, 5.0, 6.0]]),
           "grid-like": np.array([[1.0, 1.0, 1.2], [2.0, 4.85, 5.0]])}
    rng = np.random.default_rng(49)
    for seeds in (6, 8):
        for sd_name, sd in sds.items():
            for name, mu in truths.items():
                counts: dict[str, int] = {}
                for _ in range(studies):
                    draw = mu[..., None] + sd[..., None] * rng.standard_normal((2, 3, seeds))
                    r = reading(*interval(draw, resamples, rng))
                    counts[r] = counts.get(r, 0) + 1
                shares = ", ".join(f"{k} {v / studies:.2f}" for k, v in sorted(counts.items()))
                print(f"{seeds} seeds, {sd_name} sd, truth {name}: {shares}")


if __name__ == "__main__":
    main()
