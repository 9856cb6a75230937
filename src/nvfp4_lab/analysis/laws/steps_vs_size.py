"""Steps or size (results/preregistration.md, Steps or size): is NVFP4's gap set by the model's
size or by its optimizer steps? Each size trains one token budget in several tokens a step, so
its step count S moves while N and D/N stay. Per seed, the NVFP4 run is paired with the BF16 run
of its size, tokens a step and seed:

    rel_gap = (L_nvfp4 - L_bf16) / L_bf16,    abs_gap = L_nvfp4 - L_bf16    (positive = worse)

A cell is one (size, tokens a step), summarized by its mean gap. The steps exponent c of

    gap = k_size (S / S_ref)^c          (S_ref: the size's steps at 2048 tokens a step)

is fitted by weighted least squares on the cell means in the linear domain, so that no cell
drops out for a mean <= 0: weights n / s^2 of each cell's gaps, c on a grid of 0.005 in
[-3, 3], each size's k solved exactly for each c. Its interval: the 95% percentile of refits on
seed resamples, each cell's gaps drawn with replacement from mean + sqrt(n / (n - 1)) (x - mean)
(``scaling.inflated``), the weights recomputed per resample. The Monte-Carlo error of a bound is
its sd over the generator seeds ``MC_SEEDS``; a bound excludes a value only when it clears it by
more than twice that error. The readings the plan named, and what each predicts of c:

    size: c = 0       steps: c = B_LAW (the scaling law's b)       batch noise: c > 0
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..inference.stats import paired
from .scaling import inflated

B_LAW = -0.362                 # the scaling study's relative b, the steps reading's exponent
REF_TOKENS_PER_STEP = 2048     # S_ref: the scaling grid's tokens a step
GRID = np.round(np.arange(-3.0, 3.0 + 1e-9, 0.005), 3)
RESAMPLES = 4000
SEED = 49                      # the plan's generator seed
MC_SEEDS = range(49, 69)
LEVEL = 0.95
FORMS = {"relative": "rel_gap", "absolute": "abs_gap"}


def paired_gaps(runs: pd.DataFrame, recipe: str = "nvfp4",
                against: str = "bf16") -> pd.DataFrame:
    """Per seed, ``recipe`` against ``against`` at one size and tokens a step: size, params,
    tokens_per_step, steps, seed, loss, loss_against, abs_gap, rel_gap. ``runs``: collect's
    table, finished runs only enter."""
    done = runs[runs["status"] == "done"].dropna(subset=["final_val_loss", "steps"])
    done = done.assign(tokens_per_step=(done["tokens"] / done["steps"]).round().astype(int))
    keys = ["model", "params", "tokens_per_step", "steps", "seed"]
    of, base = (done[done["recipe"] == r][["recipe", *keys, "final_val_loss"]]
                for r in (recipe, against))
    out = paired(of, base, keys, "final_val_loss").rename(columns={
        "model": "size", "final_val_loss": "loss", "final_val_loss_against": "loss_against"})
    columns = ["size", "params", "tokens_per_step", "steps", "seed", "loss", "loss_against",
               "abs_gap", "rel_gap"]
    return out[columns].sort_values(["params", "steps", "seed"]).reset_index(drop=True)


def is_study(runs: pd.DataFrame) -> bool:
    """Whether some model in ``runs`` (collect's table) trained one token budget at more than
    one tokens a step."""
    done = runs.dropna(subset=["tokens", "steps"])
    per_step = (done["tokens"] / done["steps"]).round()
    return bool((per_step.groupby(done["model"]).nunique() > 1).any())


@dataclass(frozen=True)
class Cells:
    """The cells of one gap form, in ``gaps``' order: the size each belongs to (an index into
    ``sizes``), x = log(S / S_ref), and each cell's gaps (one array per cell)."""

    sizes: tuple[str, ...]
    size_of: np.ndarray
    x: np.ndarray
    values: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, gaps: pd.DataFrame, form: str) -> Cells:
        groups = list(gaps.groupby(["params", "size", "steps"], sort=True))
        sizes = tuple(dict.fromkeys(size for (_, size, _), _ in groups))
        ref = {size: ref_steps(gaps[gaps["size"] == size]) for size in sizes}
        return cls(sizes, np.array([sizes.index(s) for (_, s, _), _ in groups]),
                   np.array([math.log(steps / ref[s]) for (_, s, steps), _ in groups]),
                   tuple(cell[FORMS[form]].to_numpy(float) for _, cell in groups))

    def means(self) -> np.ndarray:
        return np.array([v.mean() for v in self.values])

    def weights(self) -> np.ndarray:
        """n / s^2 per cell; a cell of one gap gets the median weight of the others."""
        w = np.array([v.size / v.var(ddof=1) if v.size > 1 else np.nan for v in self.values])
        return np.where(np.isnan(w), np.nanmedian(w) if np.isfinite(w).any() else 1.0, w)


def ref_steps(size_gaps: pd.DataFrame) -> float:
    """S_ref: the size's steps at 2048 tokens a step, else at its middle tokens a step."""
    at = size_gaps[size_gaps["tokens_per_step"] == REF_TOKENS_PER_STEP]
    steps = at["steps"] if len(at) else size_gaps["steps"]
    return float(np.median(steps.unique()))


def fit_c(means: np.ndarray, weights: np.ndarray, x: np.ndarray,
          size_of: np.ndarray) -> np.ndarray:
    """The grid value of c that minimises sum w (g - k_size e^(c x))^2; ``means`` and
    ``weights`` may carry a leading batch axis. For a given c the best k_size leaves
    sum w g^2 - (sum w g e)^2 / sum w e^2 per size, so the fit maximises the sum over sizes of
    (sum w g e)^2 / sum w e^2."""
    means, weights = np.atleast_2d(means), np.atleast_2d(weights)
    e = np.exp(GRID[:, None] * x[None, :])                   # [grid, cells]
    explained = np.zeros((means.shape[0], GRID.size))
    for size in np.unique(size_of):
        cols = size_of == size
        num = (means[:, cols] * weights[:, cols]) @ e[:, cols].T
        explained += num**2 / (weights[:, cols] @ (e[:, cols] ** 2).T)
    best = GRID[explained.argmax(-1)]
    return best if best.size > 1 else best[0]


def resampled_c(cells: Cells, resamples: int, seed: int, chunk: int = 500) -> np.ndarray:
    """c refitted on ``resamples`` seed resamples (generator ``seed``)."""
    rng = np.random.default_rng(seed)
    pools = [inflated(v) for v in cells.values]
    out = []
    for start in range(0, resamples, chunk):
        b = min(chunk, resamples - start)
        draws = [p[rng.integers(0, p.size, size=(b, p.size))] for p in pools]
        means = np.column_stack([d.mean(1) for d in draws])
        var = np.column_stack([d.var(1, ddof=1) if d.shape[1] > 1 else np.full(b, np.nan)
                               for d in draws])
        n = np.array([p.size for p in pools], float)
        w = np.where(np.isnan(var), 1.0, n / np.clip(var, 1e-12, None))
        out.append(fit_c(means, w, cells.x, cells.size_of))
    return np.concatenate(out)


@dataclass(frozen=True)
class Exponent:
    """c with its interval, the interval's Monte-Carlo error (sd of each bound over
    ``MC_SEEDS``), and the reading the plan's rule gives."""

    c: float
    lo: float
    hi: float
    mc_lo: float
    mc_hi: float
    reading: str


def interval(draws: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def exponent(cells: Cells, resamples: int | None = None, seed: int = SEED,
             mc_seeds: range | None = None) -> Exponent:
    """The fitted c, its interval from generator ``seed`` and the bounds' Monte-Carlo error
    (``resamples`` and ``mc_seeds``: the plan's ``RESAMPLES`` and ``MC_SEEDS`` unless given)."""
    resamples, mc_seeds = resamples or RESAMPLES, mc_seeds or MC_SEEDS
    c = float(fit_c(cells.means(), cells.weights(), cells.x, cells.size_of))
    lo, hi = interval(resampled_c(cells, resamples, seed))
    others = np.array([interval(resampled_c(cells, resamples, s)) for s in mc_seeds])
    mc_lo, mc_hi = (float(v) for v in others.std(axis=0, ddof=1))
    return Exponent(c, lo, hi, mc_lo, mc_hi, reading(lo, hi, mc_lo, mc_hi))


def reading(lo: float, hi: float, mc_lo: float = 0.0, mc_hi: float = 0.0) -> str:
    """The plan's rule: which of c = 0 (size), c = B_LAW (steps) and c > 0 (batch noise) the
    interval [lo, hi] leaves standing, each bound widened by twice its Monte-Carlo error."""
    lo, hi = lo - 2 * mc_lo, hi + 2 * mc_hi
    if lo > 0:
        return "batch noise"
    if hi < B_LAW:
        return "steps, beyond the law"
    if lo > B_LAW and hi < 0:
        return "between: both act"
    if lo <= B_LAW and hi < 0:
        return "steps"
    if lo > B_LAW and lo <= 0 <= hi:
        return "size"
    return "not resolved"
