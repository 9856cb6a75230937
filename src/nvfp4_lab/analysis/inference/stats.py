"""Seed statistics: Student-t intervals and paired loss gaps between recipes.

A recipe (a label such as "nvfp4" or "mxfp4_1.25x") is trained over a few seeds. With so few
samples the 95% interval of a mean needs the Student-t quantile, not the normal 1.96:
for n values with sample standard deviation s (ddof=1) the interval is

    mean +- t_{(1+level)/2, n-1} * s / sqrt(n).

scipy gives the quantile (``scipy.stats.t``).

A recipe's loss gap to a baseline is its relative excess loss,

    gap_pct = (L_recipe - L_baseline) / L_baseline * 100,

so a POSITIVE gap means the recipe is worse (has the higher loss): the one convention of every
gap to a baseline the lab writes (``GAP_CONVENTION``; the paper's own numbers, stored with the
opposite sign, are turned around once where ``paper`` reads them). A claim "a < b" is tested
on the gap of b to a (``CLAIM_GAP``), so a claim whose a is the baseline reads the same number.
A seed fixes the initialization and the data order, so two recipes trained on the same seed
share much of their noise. The gap is therefore taken per seed (paired) and only then averaged,
with its own t interval: the paired interval is much narrower than the difference of two
unpaired means, and it is the one that says whether a recipe is resolved as better or worse.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from . import verdicts as v

GAP_CONVENTION = "positive = worse"     # what every gap to a baseline is named by
# A claim "a < b" or "a ~ b" is tested on b's gap to a, the same sign as a gap to a baseline a
CLAIM_GAP = "(b - a) / a x 100"
CLAIM_CONVENTION = "positive = the second-named arm worse"
CLAIM_SIGN_CHANGED = "2026-12-07"   # pages and status lines dated before it wrote (a - b) / a
# Derived tables' numbers as published: least squares' last bits differ with the CPU's BLAS
# kernels (AMD family 25 and 26 disagree in the 16th digit), so a law's fit and what is carried
# by it would not regenerate on another machine at full precision; at ten digits they do.
FLOAT_FORMAT = "%.10g"


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
    half = float(stats.t.ppf((1.0 + level) / 2.0, n - 1)) * sd / math.sqrt(n)
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


def paired(of: pd.DataFrame, against: pd.DataFrame, on: list[str],
           loss: str = "loss") -> pd.DataFrame:
    """The lab's one paired gap, positive = ``of`` has the higher loss: every row of ``of``
    with a row of ``against`` equal on ``on``, with ``{loss}_against``, abs_gap = loss -
    loss_against and rel_gap = abs_gap / loss_against (rows in ``of``'s order)."""
    out = of.merge(against[[*on, loss]], on=on, suffixes=("", "_against"))
    out["abs_gap"] = out[loss] - out[f"{loss}_against"]
    out["rel_gap"] = out["abs_gap"] / out[f"{loss}_against"]
    return out


def paired_gaps(runs: pd.DataFrame, baseline: str, metric: str) -> pd.DataFrame:
    """Per-seed gaps of every other label to ``baseline`` on ``metric`` (``paired``).

    One row per (label, seed) for which both the label and the baseline have a "done" run
    with a finite metric: label, seed, value, baseline_value and
    gap_pct = (value - baseline_value) / baseline_value * 100 (positive = label worse).
    Several runs of one (label, seed), e.g. a repeat, are averaged first, so each seed
    counts once. Labels come in order of first appearance, seeds ascending.
    """
    _require_label(runs, baseline, "baseline")
    per_seed = _finished(runs, metric).groupby(["label", "seed"], sort=False)[metric].mean()
    per_seed = per_seed.rename("value").reset_index()
    mine = per_seed["label"] == baseline
    out = paired(per_seed[~mine], per_seed[mine], ["seed"], "value")
    out = out.rename(columns={"value_against": "baseline_value"}).assign(
        gap_pct=out["rel_gap"] * 100.0)
    order = {label: i for i, label in enumerate(_labels(runs))}
    out = out.assign(_order=out["label"].map(order)).sort_values(["_order", "seed"])
    return out[["label", "seed", "value", "baseline_value", "gap_pct"]].reset_index(drop=True)


def _verdict(n_pairs: int, gap: Interval) -> str:
    """Word for a paired-gap interval: resolved only when it excludes 0."""
    if n_pairs == 0:
        return "no paired seeds"
    if n_pairs == 1:
        return "one seed: no interval"
    if gap.hi < 0.0:
        return "better"
    if gap.lo > 0.0:
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
    "no paired seeds", from the label's own interval;
    seeds_80: paired seeds for 80% power at the measured gap. The baseline's own row has
    verdict "baseline", NaN gaps, and as n_pairs the number of its seeds (the seeds others
    can pair with).
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
            row.update(_gap_columns(label, baseline, finished, gaps, level))
        rows.append(row)
    return pd.DataFrame(rows)


def _gap_columns(label: str, baseline: str | None, finished: pd.DataFrame,
                 gaps: pd.DataFrame, level: float) -> dict:
    """``label``'s paired gap to the baseline, its own interval, verdict and the paired seeds
    for 80% power at the measured gap."""
    if label == baseline:
        n_pairs = finished.loc[finished["label"] == label, "seed"].nunique()
        gap, verdict = Interval(0, math.nan, math.nan, math.nan, math.nan), "baseline"
    else:
        gap = mean_ci(gaps.loc[gaps["label"] == label, "gap_pct"], level)
        n_pairs = gap.n
        verdict = _verdict(gap.n, gap)
    seeds = v.seeds_needed(gap.mean, gap.sd) if gap.n >= 2 else None
    return {"n_pairs": n_pairs, "gap_pct": gap.mean, "gap_lo": gap.lo, "gap_hi": gap.hi,
            "verdict": verdict, "seeds_80": seeds}
