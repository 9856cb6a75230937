"""Seed statistics: Student-t intervals and paired loss gaps between recipes.

A recipe (a label such as "nvfp4" or "mxfp4_1.25x") is trained over a few seeds. With so few
samples the 95% interval of a mean needs the Student-t quantile, not the normal 1.96:
for n values with sample standard deviation s (ddof=1) the interval is

    mean +- t_{(1+level)/2, n-1} * s / sqrt(n).

scipy is not a dependency, so ``t_quantile`` computes the quantile itself. The t CDF with
df degrees of freedom is, for t >= 0,

    P(T > t) = I_x(df/2, 1/2) / 2,    x = df / (df + t^2),

where I_x(a, b) is the regularized incomplete beta function. I_x is evaluated with the
continued fraction of Numerical Recipes (``betacf``, modified Lentz), prefixed by
x^a (1-x)^b / (a B(a, b)) computed through ``math.lgamma``; the fraction converges quickly for
x < (a+1)/(a+b+2), and the symmetry I_x(a, b) = 1 - I_{1-x}(b, a) covers the other side. Both
x and 1-x are formed directly from t (df/(df+t^2) and t^2/(df+t^2)) so that neither loses
digits to a subtraction from 1. The quantile is then found by bisection on the upper tail,
which is monotone in t: doubling finds a bracket, halving narrows it to ~1e-12 relative.

Loss gaps follow the paper's convention: the relative difference of an experiment to a
reference is

    gap_pct = (ref - exp) / ref * 100,

so a NEGATIVE gap means the experiment is worse (has the higher loss). A seed fixes the
initialization and the data order, so two recipes trained on the same seed share much of
their noise. The gap is therefore taken per seed (paired) and only then averaged, with its
own t interval: the paired interval is much narrower than the difference of two unpaired
means, and it is the one that says whether a recipe is resolved as better or worse.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

# Enough continued-fraction terms for df up to ~1e7: the fraction needs O(sqrt(max(a, b)))
# terms near the switch point x ~ (a+1)/(a+b+2), and a = df/2.
_CF_MAX_TERMS = 20_000
_CF_EPS = 1e-16
_TINY = 1e-300


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (Numerical Recipes, modified Lentz)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _CF_MAX_TERMS + 1):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                   -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            delta = d * c
            h *= delta
        if abs(delta - 1.0) < _CF_EPS:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b})")


def _betai(a: float, b: float, x: float, y: float) -> float:
    """Regularized incomplete beta I_x(a, b), given x and y = 1 - x computed separately."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log(y))
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, y) / b


def _t_upper_tail(t: float, df: int) -> float:
    """P(T > t) for t >= 0 under Student's t with df degrees of freedom."""
    t2 = t * t
    return 0.5 * _betai(df / 2.0, 0.5, df / (df + t2), t2 / (df + t2))


def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t distribution with df degrees of freedom.

    Solves P(T > t) = min(p, 1-p) for t >= 0 by bisection and restores the sign by symmetry;
    1 - p is exact for p >= 1/2, so the tail probability carries no rounding of its own.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must lie in (0, 1), got {p}")
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if p == 0.5:
        return 0.0
    tail = min(p, 1.0 - p)
    lo, hi = 0.0, 1.0
    while _t_upper_tail(hi, df) > tail:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-13 * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        if _t_upper_tail(mid, df) > tail:
            lo = mid
        else:
            hi = mid
    t = 0.5 * (lo + hi)
    return t if p > 0.5 else -t


@dataclass(frozen=True)
class Interval:
    """A sample mean with its t interval: n values, mean, sample sd (ddof=1), [lo, hi]."""

    n: int
    mean: float
    sd: float
    lo: float
    hi: float


def mean_ci(values, level: float = 0.95) -> Interval:
    """Mean and two-sided t interval at ``level`` of ``values``, NaNs dropped.

    With one value there is no spread to estimate (sd, lo, hi are NaN); with none the mean is
    NaN too.
    """
    x = np.asarray(values, dtype=float).ravel()
    x = x[~np.isnan(x)]
    n = int(x.size)
    if n == 0:
        return Interval(0, math.nan, math.nan, math.nan, math.nan)
    mean = float(x.mean())
    if n < 2:
        return Interval(n, mean, math.nan, math.nan, math.nan)
    sd = float(x.std(ddof=1))
    half = t_quantile((1.0 + level) / 2.0, n - 1) * sd / math.sqrt(n)
    return Interval(n, mean, sd, mean - half, mean + half)


def _labels(runs: pd.DataFrame) -> list[str]:
    """Labels in order of first appearance."""
    return list(pd.unique(runs["label"]))


def _require_label(runs: pd.DataFrame, label: str, role: str) -> None:
    """Raise a ValueError that lists the available labels when ``label`` is not among them."""
    labels = _labels(runs)
    if label not in labels:
        raise ValueError(f"{role} {label!r} not found; available labels: {labels}")


def _finished(runs: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The "done" runs whose ``metric`` is finite."""
    done = runs[runs["status"] == "done"]
    return done[np.isfinite(done[metric].to_numpy(dtype=float))]


def paired_gaps(runs: pd.DataFrame, baseline: str, metric: str) -> pd.DataFrame:
    """Per-seed gaps of every other label to ``baseline`` on ``metric``.

    One row per (label, seed) for which both the label and the baseline have a "done" run
    with a finite metric: label, seed, value, baseline_value and
    gap_pct = (baseline_value - value) / baseline_value * 100 (negative = label worse).
    Several runs of one (label, seed), e.g. a repeat, are averaged first, so each seed
    counts once. Labels come in order of first appearance, seeds ascending.
    """
    _require_label(runs, baseline, "baseline")
    per_seed = _finished(runs, metric).groupby(["label", "seed"], sort=False)[metric].mean()
    per_seed = per_seed.rename("value").reset_index()
    ref = per_seed[per_seed["label"] == baseline][["seed", "value"]]
    ref = ref.rename(columns={"value": "baseline_value"})
    exp = per_seed[per_seed["label"] != baseline]
    out = exp.merge(ref, on="seed", how="inner")
    out["gap_pct"] = (out["baseline_value"] - out["value"]) / out["baseline_value"] * 100.0
    order = {label: i for i, label in enumerate(_labels(runs))}
    out = out.assign(_order=out["label"].map(order)).sort_values(["_order", "seed"])
    return out[["label", "seed", "value", "baseline_value", "gap_pct"]].reset_index(drop=True)


def _verdict(n_pairs: int, gap: Interval) -> str:
    """Word for a paired-gap interval: resolved only when it excludes 0."""
    if n_pairs == 0:
        return "no paired seeds"
    if n_pairs == 1:
        return "one seed: no interval"
    if gap.lo > 0.0:
        return "better"
    if gap.hi < 0.0:
        return "worse"
    return "not resolved"


def recipe_table(runs: pd.DataFrame, metric: str = "final_val_loss",
                 baseline: str | None = None, level: float = 0.95) -> pd.DataFrame:
    """One row per label (first appearance order) summarizing its "done" runs on ``metric``.

    Columns label, n, mean, sd, ci_lo, ci_hi, runs, where n counts the seeds with a done run
    and a finite metric (a label with none keeps its row, n = 0, so a recipe that only failed
    stays visible). Runs of one seed (a repeat) are averaged first: a repeat is not a new
    sample, and two bit-identical runs would otherwise make a zero-width interval; ``runs``
    counts them, so a reader can see where n < runs. With a ``baseline`` the paired gaps of
    ``paired_gaps`` are summarized too: n_pairs, gap_pct (their mean), gap_lo, gap_hi and a
    verdict: "better" / "worse" when the
    gap interval excludes 0, "not resolved" when it includes 0, "one seed: no interval",
    "no paired seeds". The baseline's own row has verdict "baseline", NaN gaps, and as
    n_pairs the number of its seeds (the seeds others can pair with).
    """
    if baseline is not None:
        _require_label(runs, baseline, "baseline")
    finished = _finished(runs, metric)
    per_seed = finished.groupby(["label", "seed"], sort=False)[metric].agg(["mean", "size"])
    gaps = paired_gaps(runs, baseline, metric) if baseline is not None else None
    rows = []
    for label in _labels(runs):
        mine = per_seed.loc[label] if label in per_seed.index.get_level_values(0) else None
        ci = mean_ci(mine["mean"] if mine is not None else [], level)
        row = {"label": label, "n": ci.n, "mean": ci.mean, "sd": ci.sd,
               "ci_lo": ci.lo, "ci_hi": ci.hi,
               "runs": int(mine["size"].sum()) if mine is not None else 0}
        if gaps is not None:
            if label == baseline:
                n_pairs = finished.loc[finished["label"] == label, "seed"].nunique()
                gap, verdict = Interval(0, math.nan, math.nan, math.nan, math.nan), "baseline"
            else:
                gap = mean_ci(gaps.loc[gaps["label"] == label, "gap_pct"], level)
                n_pairs, verdict = gap.n, _verdict(gap.n, gap)
            row.update(n_pairs=n_pairs, gap_pct=gap.mean, gap_lo=gap.lo, gap_hi=gap.hi,
                       verdict=verdict)
        rows.append(row)
    return pd.DataFrame(rows)
