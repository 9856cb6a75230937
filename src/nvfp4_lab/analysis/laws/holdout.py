"""The law tested on a cell it has not seen (results/preregistration.md, Scaling study,
amendment 7). A study's corner, its largest model at its longest training, is the cell
nearest the paper's regime; the law fitted to every other cell predicts it, and the corner's
own seeds say whether the law reached it.

A new cell's mean is not the law's value there: it carries its own seed noise and the law's
misfit. So the prediction interval adds to each bootstrap refit's log gap at the corner (the
law's uncertainty, ``scaling.fit``) one of the fit's residuals, drawn with replacement:

    log g*_i = log k_i + a_i log(D/N) + b_i log N + sqrt(n / (n - 3)) r_j,    j uniform,

(log k_i, a_i, b_i) the i-th refit, r the residuals in log gap of the n fitted cells (least
squares with 3 parameters leaves residuals whose mean square is (n - 3) / n of the errors'),
the draws from a numpy Generator seeded (fit's seed, 1), a stream apart from the one the
refits drew their seeds from. The interval is the percentiles of exp(log g*). The corner's
seeds enter neither the fit nor its resamples, so the prediction is the same number before
and after they finish: it can be written down first.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..inference.stats import Interval, mean_ci
from .scaling import FORMS, LEVEL, Fit, Prediction, fit

SAME_LEVEL = 0.05      # decades: a run trains whole steps, so its D/N sits a little off nominal


@dataclass(frozen=True)
class Holdout:
    """The ``form`` law fitted to the ``fitted`` cells other than ``size`` at D/N ``tpp``,
    its ``predicted`` gap there, and the cell's ``observed`` seed gaps (n = 0: not in yet)."""

    form: str
    size: str
    tpp: float
    fitted: int
    predicted: Prediction
    observed: Interval

    @property
    def reading(self) -> str:
        """Where the observed mean lies against the prediction interval."""
        if self.observed.n == 0:
            return "not finished"
        mean, p = self.observed.mean, self.predicted
        return "below" if mean < p.lo else "above" if mean > p.hi else "inside"


def predict(law: Fit, params: float, tpp: float, level: float = LEVEL) -> Prediction:
    """The ``law``'s gap at N = ``params``, D/N = ``tpp`` and the interval at ``level`` in
    which a new cell's mean should lie (module docstring); ValueError on 3 cells or fewer,
    whose law passes through every cell and leaves no residual to draw."""
    n = law.n_cells
    if n <= 3:
        raise ValueError(f"a prediction interval draws the fit's residuals, and {n} cells "
                         f"leave none; it needs four or more")
    rng = np.random.default_rng([law.seed, 1])
    spread = math.sqrt(n / (n - 3)) * np.asarray(law.residuals)
    logs = (law.draws @ np.array([1.0, math.log(tpp), math.log(params)])
            + rng.choice(spread, size=len(law.draws)))
    lo, hi = np.exp(np.percentile(logs, [50 * (1 - level), 50 * (1 + level)]))
    return Prediction(law.form, params, tpp * params, float(law.law(params, tpp)),
                      float(lo), float(hi))


def in_cell(gaps: pd.DataFrame, size: str, tpp: float) -> pd.Series:
    """Which rows of ``gaps`` (``scaling.paired_gaps``) belong to ``size`` at D/N ``tpp``."""
    off = np.abs(np.log10(gaps["tpp"].to_numpy(dtype=float) / tpp))
    return (gaps["size"] == size) & (off < SAME_LEVEL)


def check(gaps: pd.DataFrame, size: str, params: float, tpp: float, form: str,
          level: float = LEVEL) -> Holdout:
    """The ``form`` law fitted to ``gaps`` without the cell ``size`` (N = ``params``) at D/N
    ``tpp``, its prediction there and that cell's seed gaps in ``gaps``, if any (the caller
    passes only cells whose seeds are all in)."""
    held = in_cell(gaps, size, tpp)
    law = fit(gaps[~held], form, level=level)
    return Holdout(form, size, tpp, law.n_cells, predict(law, params, tpp, level),
                   mean_ci(gaps.loc[held, FORMS[form]], level))
