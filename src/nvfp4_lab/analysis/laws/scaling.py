"""Scaling of the FP4 loss gap to BF16 with model size N and tokens per parameter D/N.

Each FP4 run is paired with the BF16 run of the same size, tokens and seed:

    abs_gap = L_fp4 - L_bf16,        rel_gap = abs_gap / L_bf16

(positive = FP4 worse; a gap of ``analysis/sources/paper.py`` is 100 rel_gap). A cell,
one (size, D/N), is summarized by the mean gap over its seeds and its Student-t interval
(``stats.mean_ci``). The law

    gap = k (D/N)^a N^b,    i.e.    log g = log k + a log(D/N) + b log N,

is fitted to the relative or the absolute gap by least squares on the logs of the cell means.
Cells with a mean gap <= 0 have no log: they are left out and listed. One size cannot give b.

Intervals on log k, a and b are percentiles of a bootstrap over seeds, drawn from a numpy
Generator of fixed seed so that published numbers regenerate (to the ten digits of
``stats.FLOAT_FORMAT`` on any CPU: BLAS kernels differ in the last bits): each resample draws
every cell's n seed gaps with replacement, recomputes the cell means and refits. The draws are
not the gaps x_i themselves but mean + sqrt(n / (n - 1)) (x_i - mean), so that a resampled cell
mean has variance s^2 / n (s^2 the unbiased sample variance), not the plain bootstrap's (n -
1)/n s^2 / n, 2/3 of it at n = 3: on synthetic studies (4 sizes x 5 D/N x 3 seeds, log-normal
seed noise of 10% or 30%) the 95% intervals on a and b then cover ~93% of the time instead of
~86%. A cell with one seed has no deviation to resample and stays fixed at its value. A cell
whose resampled mean is <= 0 drops out of that resample only; a resample whose cells cannot
identify the 3 parameters (one size, or one D/N level: values a tenth of a decade apart count
as one) is skipped and counted. Not a parametric bootstrap: that covers at most ~1.5 points
nearer 95% but assumes a shape for the seed noise (notebooks/LOG.md, 2026-12-04 (session 22)).

Which form fits better: log rel_gap = log abs_gap - log L_bf16 and both laws have 3 parameters,
so on the cells both fits use, the one with the smaller residual RMS in log gap wins. Whether
seed noise could flip that: the same resamples, each refitting both forms on the same seeds,
give a percentile interval on rms_relative - rms_absolute; one that includes 0 says the runs
do not tell the forms apart.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..inference.stats import mean_ci, paired

FORMS = {"relative": "rel_gap", "absolute": "abs_gap"}
LEVEL = 0.95
RESAMPLES = 2000
SEED = 31                      # the number: the published intervals regenerate from it
_KEYS = ["size", "params", "tokens", "seed"]


@dataclass(frozen=True)
class Design:
    """A law's cells and regressors: the gaps' columns that key a cell (grouped in this order)
    and the cell columns whose logs follow the intercept, one parameter each after log k
    (``names``). ``tpp`` is a cell's tokens / params. Another law (``steps_law``) fits the same
    way with its own design."""

    keys: tuple[str, ...]
    terms: tuple[str, ...]
    names: tuple[str, ...]

    def x(self, cells: pd.DataFrame) -> np.ndarray:
        """Rows (1, log term, ...) of ``cells``."""
        return np.column_stack([np.ones(len(cells)), *(np.log(cells[t]) for t in self.terms)])

    def frame(self, keys) -> pd.DataFrame:
        """The cells keyed by ``keys`` (tuples in the order of ``self.keys``), with tpp."""
        out = pd.DataFrame(list(keys), columns=list(self.keys))
        return out.assign(tpp=out["tokens"] / out["params"])


GRID = Design(("params", "tokens", "size"), ("tpp", "params"), ("k", "a", "b"))


@dataclass(frozen=True)
class Cell:
    """One (size, D/N) cell: N, D/N and the mean gap over its seeds."""

    size: str
    params: float
    tpp: float
    gap: float


@dataclass(frozen=True)
class Fit:
    """gap = k (D/N)^a N^b fitted to the ``form`` gap; intervals from ``resamples`` bootstrap
    refits (``skipped`` unusable; ``draws``: the others' log k, a, b). ``residuals``: log observed
    - log fitted per cell of ``cells``; ``excluded``: the cells with mean gap <= 0."""

    form: str
    k: float
    a: float
    b: float
    log_k_ci: tuple[float, float]
    a_ci: tuple[float, float]
    b_ci: tuple[float, float]
    cells: tuple[Cell, ...]
    n_cells: int
    residuals: tuple[float, ...]
    rms: float
    excluded: tuple[Cell, ...]
    resamples: int
    skipped: int
    seed: int
    draws: np.ndarray = field(compare=False, repr=False)

    def law(self, params, tpp) -> np.ndarray:
        """The fitted gap k (D/N)^a N^b at N = ``params`` and D/N = ``tpp``."""
        return self.k * np.asarray(tpp, dtype=float) ** self.a * np.asarray(
            params, dtype=float) ** self.b


@dataclass(frozen=True)
class FormChoice:
    """The better-fitting form, why, and the residual RMS of both on their common cells;
    ``diff_ci``: the bootstrap's interval on rms_relative - rms_absolute (NaN on 3 cells or
    fewer), ``apart``: whether it excludes 0, so that seed noise does not flip the choice."""

    form: str
    reason: str
    rms_relative: float
    rms_absolute: float
    n_cells: int
    diff_ci: tuple[float, float]
    apart: bool


@dataclass(frozen=True)
class Prediction:
    """The law's ``form`` gap at (params, tokens) and the bootstrap refits' interval on it."""

    form: str
    params: float
    tokens: float
    gap: float
    lo: float
    hi: float


def _runs_of(runs: pd.DataFrame, recipe: str) -> pd.DataFrame:
    """The runs of ``recipe`` with a finite loss; ValueError if none, or if one repeats."""
    mine = runs[(runs["recipe"] == recipe) & np.isfinite(runs["loss"].to_numpy(dtype=float))]
    if mine.empty:
        raise ValueError(f"recipe {recipe!r} has no run with a finite loss; recipes: "
                         f"{sorted(runs['recipe'].unique())}")
    if mine.duplicated(_KEYS).any():
        raise ValueError(f"recipe {recipe!r} has several runs of one (size, tokens, seed)")
    return mine[_KEYS + ["loss"]]


def paired_gaps(runs: pd.DataFrame, recipe: str, against: str = "bf16") -> pd.DataFrame:
    """Per-seed gaps of ``recipe`` to ``against``: one row per (size, params, tokens, tpp,
    seed) where both have a run with a finite loss; a run without its partner is dropped.
    Columns: those keys, loss, loss_against, abs_gap and rel_gap (positive = recipe worse)."""
    out = paired(_runs_of(runs, recipe), _runs_of(runs, against), _KEYS)
    out["tpp"] = out["tokens"] / out["params"]
    columns = [*_KEYS[:3], "tpp", "seed", "loss", "loss_against", "abs_gap", "rel_gap"]
    return out[columns].sort_values(["params", "tpp", "seed"]).reset_index(drop=True)


def _groups(gaps: pd.DataFrame, design: Design = GRID):
    """The cells' rows, by the design's keys (params, then tokens, ...)."""
    return gaps.groupby(list(design.keys), sort=True)


def cell_table(gaps: pd.DataFrame, form: str, level: float = LEVEL,
               design: Design = GRID) -> pd.DataFrame:
    """One row per cell (by default a (size, D/N)): size, params, tokens, the design's other
    keys, tpp, n, mean, lo, hi of the ``form`` gap over seeds (Student-t interval; NaN bounds
    for one seed)."""
    if form not in FORMS:
        raise ValueError(f"form {form!r} unknown; one of {list(FORMS)}")
    rows = []
    for key, cell in _groups(gaps, design):
        ci = mean_ci(cell[FORMS[form]], level)
        row = dict(zip(design.keys, key))
        rows.append({**row, "tpp": row["tokens"] / row["params"],
                     "n": ci.n, "mean": ci.mean, "lo": ci.lo, "hi": ci.hi})
    extra = [k for k in design.keys if k not in _KEYS]
    return pd.DataFrame(rows, columns=[*_KEYS[:3], *extra, "tpp", "n", "mean", "lo", "hi"])


def levels(log_values: np.ndarray) -> int:
    """How many distinct levels: values a tenth of a decade apart or less are one level (a run
    trains whole steps, so its D/N sits a little above its nominal one)."""
    return len(np.unique(np.round(np.asarray(log_values) / np.log(10), 1)))


def _ols(x: np.ndarray, gap: np.ndarray) -> np.ndarray | None:
    """(log k, a, b, ...) by least squares of log gap on ``x``; None when x cannot identify
    them: a regressor with fewer than two levels (one D/N, one size), or collinear."""
    if any(levels(col) < 2 for col in x[:, 1:].T) or np.linalg.matrix_rank(x) < x.shape[1]:
        return None
    return np.linalg.lstsq(x, np.log(gap), rcond=None)[0]


@dataclass(frozen=True)
class PointFit:
    """The law's coefficients (log k, a, b, ...) on the ``used`` cells (positive mean), their
    ``residuals`` in log gap, and the ``dropped`` cells (mean <= 0)."""

    coef: np.ndarray
    used: pd.DataFrame
    dropped: pd.DataFrame
    residuals: np.ndarray


def point_fit(table: pd.DataFrame, design: Design = GRID) -> PointFit:
    """Least squares of the log cell means of ``table`` (``cell_table``) on ``design``."""
    used, dropped = table[table["mean"] > 0], table[~(table["mean"] > 0)]
    sizes = list(pd.unique(used["size"]))
    if len(sizes) < 2:
        raise ValueError(f"b is not identifiable from {len(sizes)} model size(s) with a "
                         f"positive mean gap {sizes}: the fit needs two or more")
    x = design.x(used)
    coef = _ols(x, used["mean"].to_numpy())
    if coef is None:
        names = f"{', '.join(design.names[:-1])} and {design.names[-1]}"
        raise ValueError(f"the {len(used)} cells with a positive mean gap cannot identify "
                         f"{names}: they need two D/N levels (more than a tenth of a "
                         f"decade apart) and D/N varying apart from N")
    return PointFit(coef, used, dropped, np.log(used["mean"].to_numpy()) - x @ coef)


def inflated(values: np.ndarray) -> np.ndarray:
    """mean + sqrt(n / (n - 1)) (x - mean): the values to resample, so that the mean of n
    draws with replacement has variance s^2 / n, s^2 the unbiased sample variance (module
    docstring). One value is returned as it is: it has no deviation to inflate."""
    if values.size < 2:
        return values
    mean = values.mean()
    return mean + math.sqrt(values.size / (values.size - 1)) * (values - mean)


def _resampled_means(gaps: pd.DataFrame, columns: list[str], resamples: int, seed: int,
                     design: Design = GRID) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The cells' regressors and, per column, their means over ``resamples`` resamples of the
    seeds, [resample, cell]; every column takes the same seeds, so a resample pairs the forms."""
    rng = np.random.default_rng(seed)
    keys, cells = zip(*_groups(gaps, design))
    picks = [rng.integers(0, len(cell), (resamples, len(cell))) for cell in cells]
    means = {c: np.column_stack([inflated(cell[c].to_numpy())[pick].mean(axis=1)
                                 for cell, pick in zip(cells, picks)]) for c in columns}
    return design.x(design.frame(keys)), means


def bootstrap(gaps: pd.DataFrame, column: str, resamples: int, seed: int,
              design: Design = GRID) -> np.ndarray:
    """The usable refits' (log k, a, b, ...), one row per resample that identifies them."""
    x, means = _resampled_means(gaps, [column], resamples, seed, design)
    refits = [_ols(x[row > 0], row[row > 0]) for row in means[column]]
    return np.array([c for c in refits if c is not None]).reshape(-1, x.shape[1])


def _residuals(x: np.ndarray, means: np.ndarray) -> np.ndarray | None:
    """log mean - log fitted per cell, NaN where the mean is <= 0 (left out of the fit);
    None when the cells left cannot identify the law."""
    keep = means > 0
    coef = _ols(x[keep], means[keep])
    if coef is None:
        return None
    return np.where(keep, np.log(np.where(keep, means, 1.0)) - x @ coef, np.nan)


def _rms_differences(gaps: pd.DataFrame, resamples: int, seed: int) -> np.ndarray:
    """rms_relative - rms_absolute on each resample's common cells, where both laws identify
    and more than 3 cells leave residuals; the point comparison's arithmetic, resampled."""
    x, means = _resampled_means(gaps, ["rel_gap", "abs_gap"], resamples, seed)
    out = []
    for rel, ab in zip(means["rel_gap"], means["abs_gap"]):
        r, a = _residuals(x, rel), _residuals(x, ab)
        if r is None or a is None:
            continue
        common = ~(np.isnan(r) | np.isnan(a))
        if common.sum() > 3:
            out.append(math.sqrt(np.mean(r[common] ** 2)) - math.sqrt(np.mean(a[common] ** 2)))
    return np.array(out)


def interval(values: np.ndarray, level: float) -> np.ndarray:
    """Percentile interval of ``values`` along axis 0 (NaN when empty)."""
    if len(values) == 0:
        return np.full((2,) + values.shape[1:], np.nan)
    return np.percentile(values, [50 * (1 - level), 50 * (1 + level)], axis=0)


def _cells(table: pd.DataFrame) -> tuple[Cell, ...]:
    return tuple(Cell(r.size, float(r.params), float(r.tpp), float(r.mean))
                 for r in table.itertuples())


def fit(gaps: pd.DataFrame, form: str, resamples: int = RESAMPLES, seed: int = SEED,
        level: float = LEVEL) -> Fit:
    """The law fitted to the cell means of the ``form`` gap, with bootstrap intervals at
    ``level`` from ``resamples`` resamples of the seeds drawn with generator ``seed``."""
    p = point_fit(cell_table(gaps, form, level))
    draws = bootstrap(gaps, FORMS[form], resamples, seed)
    cis = [(float(lo), float(hi)) for lo, hi in interval(draws, level).T]
    return Fit(form, float(np.exp(p.coef[0])), float(p.coef[1]), float(p.coef[2]), *cis,
               _cells(p.used), len(p.used), tuple(map(float, p.residuals)),
               float(np.sqrt(np.mean(p.residuals ** 2))),
               _cells(p.dropped), resamples, resamples - len(draws), seed, draws)


def better_form(gaps: pd.DataFrame, rel_fit: Fit, abs_fit: Fit,
                level: float = LEVEL) -> FormChoice:
    """The form whose law leaves the smaller residual RMS in log gap on the cells both fits
    use (see the module docstring for why that compares like with like); ties, and cells too
    few to leave a residual (3 or fewer), go to "relative". The difference gets the interval
    of the fits' own resamples of ``gaps``, refitting both forms on the same seeds."""
    if (rel_fit.form, abs_fit.form) != ("relative", "absolute"):
        raise ValueError(f"expected a relative and an absolute fit, got {rel_fit.form!r} and "
                         f"{abs_fit.form!r}")
    rel = {(c.size, c.tpp): r for c, r in zip(rel_fit.cells, rel_fit.residuals)}
    ab = {(c.size, c.tpp): r for c, r in zip(abs_fit.cells, abs_fit.residuals)}
    common = sorted(rel.keys() & ab.keys())
    rms = {form: math.sqrt(np.mean([res[c] ** 2 for c in common]))
           for form, res in (("relative", rel), ("absolute", ab))}
    if len(common) <= 3:
        reason = (f"Neither form fits better yet: on the {len(common)} cells both fits use, "
                  f"three parameters pass through every cell, so neither law leaves a residual; "
                  f"a comparison needs a fourth cell.")
        return FormChoice("relative", reason, rms["relative"], rms["absolute"], len(common),
                          (math.nan, math.nan), False)
    lo, hi = interval(_rms_differences(gaps, rel_fit.resamples, rel_fit.seed), level)
    apart = bool(lo > 0 or hi < 0)
    form = min(rms, key=rms.get)
    other = "absolute" if form == "relative" else "relative"
    reason = (f"On the {len(common)} cells both fits use, the {form} law leaves a residual RMS "
              f"of {rms[form]:.3g} in log gap against {rms[other]:.3g} for the {other} one, "
              f"with the same three parameters. Refitted on the same {rel_fit.resamples} "
              f"resamples of the seeds, the difference (relative - absolute) has a "
              f"{level:.0%} interval of [{lo:+.3g}, {hi:+.3g}]: "
              + ("seed noise does not flip the choice." if apart else
                 "it includes 0, so these runs do not tell the two forms apart."))
    return FormChoice(form, reason, rms["relative"], rms["absolute"], len(common),
                      (float(lo), float(hi)), apart)


def extrapolate(fit: Fit, params: float, tokens: float, level: float = LEVEL) -> Prediction:
    """The law's gap k (D/N)^a N^b at ``params``, ``tokens``, and the percentile interval at
    ``level`` of the bootstrap refits' predictions there."""
    x = GRID.x(pd.DataFrame({"tpp": [tokens / params], "params": [params]}))[0]
    gap = float(fit.law(params, tokens / params))
    lo, hi = np.exp(interval(fit.draws @ x, level))
    return Prediction(fit.form, params, tokens, gap, float(lo), float(hi))
