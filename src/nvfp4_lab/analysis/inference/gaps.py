"""Loss gaps along training and token-efficiency multipliers.

Gap curves. The relative gap of an experiment's loss to the reference's, (exp - ref) / ref *
100 percent (positive = experiment worse, as ``stats.paired_gaps``; the paper plots the same
quantity with the opposite sign), as training proceeds. Runs log at their own steps, and a
recipe can change tokens per step, so the curves are compared on the token axis: for each seed
the experiment's curve is linearly interpolated onto the tokens at which the same-seed
reference logged the metric. Outside the experiment's own token range nothing is extrapolated
(a run that stopped early has no loss there); those points are NaN and drop out. The per-seed
gaps at a token count are then averaged over seeds with the t interval of ``stats.mean_ci``, as
in ``stats.paired_gaps``.

Token multipliers. "MXFP4 needs 1.36x the tokens to match NVFP4" is read off runs of one
recipe at several token budgets T_1 < T_2 < ...: with the reference's loss L* as target, the
multiplier is T / T_ref where T is the budget at which the recipe's loss first reaches L*.
Between two budgets the loss is taken as linear in tokens, so at the first adjacent pair
with L_i > L* >= L_{i+1}

    T = T_i + (L_i - L*) / (L_i - L_{i+1}) * (T_{i+1} - T_i).

Only the first crossing counts: noise can make the loss dip below L*, rise, and dip again,
and the first budget that reaches the target is the honest answer. If even the smallest
budget already reaches L*, the multiplier is at most that budget's (an upper bound); if no
budget does, there is no multiplier within the budgets trained.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .stats import mean_ci


def _clean_sorted(tokens, values) -> tuple[np.ndarray, np.ndarray]:
    """Finite (tokens, values) pairs sorted by tokens, values at equal tokens averaged.

    Equal tokens occur when a resumed run logs a step again, or when repeats of one budget
    are pooled; averaging gives one point per token count, which interpolation requires.
    """
    t = np.asarray(tokens, dtype=float).ravel()
    v = np.asarray(values, dtype=float).ravel()
    keep = np.isfinite(t) & np.isfinite(v)
    t, v = t[keep], v[keep]
    uniq, inverse = np.unique(t, return_inverse=True)
    sums = np.bincount(inverse, weights=v, minlength=uniq.size)
    counts = np.bincount(inverse, minlength=uniq.size)
    return uniq, sums / np.maximum(counts, 1)


def on_grid(tokens, values, grid) -> np.ndarray:
    """One curve linearly interpolated onto ``grid`` (tokens), NaN outside its token range.

    NaN points are dropped first and the curve is sorted by tokens; never extrapolates.
    """
    t, v = _clean_sorted(tokens, values)
    g = np.asarray(grid, dtype=float)
    if t.size == 0:
        return np.full(g.shape, np.nan)
    return np.interp(g, t, v, left=np.nan, right=np.nan)


def _labels_or_raise(table: pd.DataFrame, label: str, role: str) -> list[str]:
    """Labels in order of first appearance; ValueError listing them if ``label`` is absent."""
    labels = list(pd.unique(table["label"]))
    if label not in labels:
        raise ValueError(f"{role} {label!r} not found; available labels: {labels}")
    return labels


def gap_curves(curves: pd.DataFrame, baseline: str, metric: str = "val_loss",
               level: float = 0.95) -> pd.DataFrame:
    """Relative gap to ``baseline`` along tokens, paired by seed and averaged over seeds.

    For every other label and every seed it shares with the baseline, the label's curve is
    interpolated onto the baseline's tokens (same seed, where the baseline has ``metric``) and
    gap_pct = (exp - ref) / ref * 100 (positive = worse). Rows of several runs of one (label,
    seed) are pooled into one curve (values at equal tokens averaged). Output: label, tokens, n
    (seeds with a gap there), mean, lo, hi (t interval; NaN for n < 2), labels in order of
    first appearance, tokens ascending. Step grids may differ between runs.
    """
    labels = _labels_or_raise(curves, baseline, "baseline")
    by_key = dict(list(curves.groupby(["label", "seed"], sort=False)))
    per_seed = []
    for (label, seed), rows in by_key.items():
        ref_rows = by_key.get((baseline, seed))
        if label == baseline or ref_rows is None:
            continue
        ref_t, ref_v = _clean_sorted(ref_rows["tokens"], ref_rows[metric])
        exp_v = on_grid(rows["tokens"], rows[metric], ref_t)
        per_seed.append(pd.DataFrame({"label": label, "tokens": ref_t,
                                      "gap": (exp_v - ref_v) / ref_v * 100.0}))
    columns = ["label", "tokens", "n", "mean", "lo", "hi"]
    if not per_seed:
        return pd.DataFrame(columns=columns)
    gaps = pd.concat(per_seed).dropna(subset=["gap"])
    rows = []
    for (label, tokens), at in gaps.groupby(["label", "tokens"]):
        ci = mean_ci(at["gap"], level)
        rows.append({"label": label, "tokens": tokens, "n": ci.n, "mean": ci.mean,
                     "lo": ci.lo, "hi": ci.hi})
    out = pd.DataFrame(rows, columns=columns)
    order = {label: i for i, label in enumerate(labels)}
    out = out.assign(_order=out["label"].map(order)).sort_values(["_order", "tokens"])
    return out[columns].reset_index(drop=True)


@dataclass(frozen=True)
class Multiplier:
    """Tokens needed to reach a target loss, as a multiple of the reference's tokens.

    status "reached": value = interpolated tokens at the target / base_tokens.
    status "already": the smallest budget already has loss <= target; value = smallest
    budget / base_tokens is only an UPPER BOUND (a smaller budget might have sufficed).
    status "never": no budget reaches the target; value None.
    approximate: True when read off one training curve rather than separate runs.
    """

    value: float | None
    status: str
    approximate: bool


def _first_crossing(tokens, losses, target: float, base_tokens: float,
                    approximate: bool) -> Multiplier:
    """The multiplier at the first point where the loss comes down to <= ``target``."""
    t, loss = _clean_sorted(tokens, losses)
    if t.size and loss[0] <= target:
        return Multiplier(float(t[0] / base_tokens), "already", approximate)
    for i in range(1, t.size):
        if loss[i] <= target:
            frac = (loss[i - 1] - target) / (loss[i - 1] - loss[i])
            needed = t[i - 1] + frac * (t[i] - t[i - 1])
            return Multiplier(float(needed / base_tokens), "reached", approximate)
    return Multiplier(None, "never", approximate)


def token_multiplier(tokens, losses, target: float, base_tokens: float) -> Multiplier:
    """Multiplier from separate runs at several token budgets (one final loss per budget).

    Loss is interpolated linearly in tokens between the first adjacent pair of budgets where
    it crosses to <= ``target``; later re-crossings are ignored. approximate=False.
    """
    return _first_crossing(tokens, losses, target, base_tokens, approximate=False)


def curve_multiplier(tokens, losses, target: float, base_tokens: float) -> Multiplier:
    """The same read off ONE run's loss curve at intermediate points; approximate=True.

    Under a learning-rate schedule the loss partway through a run is not what a separately
    scheduled run of that length would reach (it has not decayed yet), so the result is
    flagged approximate.
    """
    return _first_crossing(tokens, losses, target, base_tokens, approximate=True)


def _multiple(tokens: float, base_tokens: float) -> str:
    """Budget as a multiple of the reference's tokens: 1.25 -> "1.25x", 1 -> "1.0x"."""
    return f"{round(tokens / base_tokens, 4)}x"


def _recipe_row(recipe: str, runs: pd.DataFrame, targets: pd.Series, base_tokens: float,
                metric: str) -> dict:
    """One row of ``efficiency_table`` for the done runs of one recipe."""
    seeds = [s for s in pd.unique(runs["seed"]) if s in targets.index]
    per_seed = [token_multiplier(runs.loc[runs["seed"] == s, "tokens"],
                                 runs.loc[runs["seed"] == s, metric], targets[s], base_tokens)
                for s in seeds]
    budgets = np.unique(runs["tokens"].to_numpy(dtype=float))
    return {"recipe": recipe, "n_seeds": len(seeds),
            "budgets": ", ".join(_multiple(b, base_tokens) for b in budgets),
            **_aggregate(per_seed, budgets[-1], base_tokens)}


def _aggregate(per_seed: list[Multiplier], largest: float, base_tokens: float) -> dict:
    """Mean and t interval over the seeds that reached the target, and the status."""
    hit = [m for m in per_seed if m.status != "never"]
    if not per_seed:
        status = "no seeds shared with the reference"
    elif len(hit) == len(per_seed):
        status = "reached"
    elif not hit:
        status = f"never within {_multiple(largest, base_tokens)}"
    else:
        status = f"mixed: {len(hit)}/{len(per_seed)} reached"
    ci = mean_ci([m.value for m in hit])
    return {"multiplier_mean": ci.mean, "multiplier_lo": ci.lo, "multiplier_hi": ci.hi,
            "status": status, "upper_bound": any(m.status == "already" for m in hit)}


def efficiency_table(runs: pd.DataFrame, reference: str,
                     metric: str = "final_val_loss") -> pd.DataFrame:
    """Token multiplier of every recipe against the ``reference`` label ("done" runs only).

    Per seed the reference's metric is the target and its tokens the base. Every other
    ``recipe`` (all budgets of one recipe share it) gets one row: recipe, n_seeds (seeds
    shared with the reference), budgets ("1.0x, 1.25x"), multiplier_mean / _lo / _hi over the
    seeds that reached the target (t interval), status ("reached" if all seeds did,
    "never within Bx" with B the largest budget if none did, "mixed: k/n reached"), and
    upper_bound: True when some seed's smallest budget already reached the target, so its
    value only bounds the multiplier from above. The reference's own recipe is included only
    when it was trained at more than one budget.
    """
    _labels_or_raise(runs, reference, "reference")
    done = runs[(runs["status"] == "done") & np.isfinite(runs[metric].to_numpy(dtype=float))]
    ref = done[done["label"] == reference]
    if ref.empty:
        raise ValueError(f"reference {reference!r} has no done run with a finite {metric}")
    if ref["tokens"].nunique() != 1:
        raise ValueError(f"reference {reference!r} runs differ in tokens: "
                         f"{sorted(ref['tokens'].unique())}")
    base_tokens = float(ref["tokens"].iloc[0])
    targets = ref.groupby("seed")[metric].mean()
    ref_recipes = set(ref["recipe"])
    rows = []
    for recipe, recipe_runs in done.groupby("recipe", sort=False):
        if recipe in ref_recipes and recipe_runs["tokens"].nunique() == 1:
            continue
        rows.append(_recipe_row(recipe, recipe_runs, targets, base_tokens, metric))
    columns = ["recipe", "n_seeds", "budgets", "multiplier_mean", "multiplier_lo",
               "multiplier_hi", "status", "upper_bound"]
    return pd.DataFrame(rows, columns=columns)


def curve_efficiency_table(runs: pd.DataFrame, curves: pd.DataFrame, reference: str,
                           metric: str = "val_loss") -> pd.DataFrame:
    """Approximate token multipliers read off each label's training curve (``curve_multiplier``)
    against the reference's final ``metric`` of the same seed: for sweeps where every recipe
    ran one budget. One row per non-reference label: label, n_seeds, multiplier_mean / _lo /
    _hi, status, upper_bound (as ``efficiency_table``)."""
    final = f"final_{metric}"
    _labels_or_raise(runs, reference, "reference")
    ref = runs[(runs["label"] == reference) & (runs["status"] == "done")].dropna(subset=[final])
    if ref.empty:
        raise ValueError(f"reference {reference!r} has no done run with a finite {final}")
    base_tokens = float(ref["tokens"].max())
    targets = ref.groupby("seed")[final].mean()
    rows = []
    for label, part in curves[curves["label"] != reference].groupby("label", sort=False):
        seeds = [s for s in pd.unique(part["seed"]) if s in targets.index]
        per_seed = [curve_multiplier(part.loc[part["seed"] == s, "tokens"],
                                     part.loc[part["seed"] == s, metric], targets[s],
                                     base_tokens) for s in seeds]
        rows.append({"label": label, "n_seeds": len(seeds),
                     **_aggregate(per_seed, float(part["tokens"].max()), base_tokens)})
    return pd.DataFrame(rows, columns=["label", "n_seeds", "multiplier_mean", "multiplier_lo",
                                       "multiplier_hi", "status", "upper_bound"])
