"""The report of a scaling study: runs that differ in tokens per parameter and model size
(``+ablation=scaling``; results/preregistration.md, Scaling study), read as the FP4 gap's law.

For NVFP4 and MXFP4 against BF16, and MXFP4 against NVFP4, on the cells whose seeds are all in
(a cell with fewer is still running, not a smaller sample): the cells' gaps with their seed
intervals, the law fitted to the relative and to the absolute gap (``scaling.fit``), the form
that fits better, both laws extrapolated to the paper's runs beside what the paper reports,
and their prediction of the grid's corner from the other cells (``holdout``). Tables go to
``tables/scaling_*.csv``, figures (``scaling_figures``) to ``figures/scaling_*.png``; the
section comes back as paragraphs and tables, which ``report`` renders.
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from ...sweepdir import SweepDir
from ..inference.stats import FLOAT_FORMAT
from . import extrapolation, holdout, scaling
from . import scaling_figures as figures

COMPARISONS = (("nvfp4", "bf16"), ("mxfp4", "bf16"), ("mxfp4", "nvfp4"))
CELL = ("train.tokens_per_param", "model")      # the grid's keys a pending run is listed by


def is_study(runs: pd.DataFrame) -> bool:
    """Whether ``runs`` (collect's table) span several sizes, each trained for its own token
    budget: a study, even while it has run one tokens-per-parameter level only."""
    sized = runs.dropna(subset=["params", "tokens"])
    return sized["params"].nunique() > 1 and sized["tokens"].nunique() > 1


def study_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The finished runs as ``scaling.paired_gaps`` reads them: size, params, tokens, recipe,
    seed, loss (the final validation loss), and the device each ran on."""
    done = runs[runs["status"] == "done"].dropna(subset=["params", "final_val_loss"])
    return pd.DataFrame({"size": done["model"], "params": done["params"].astype(int),
                         "tokens": done["tokens"].astype(int), "recipe": done["recipe"],
                         "seed": done["seed"], "loss": done["final_val_loss"],
                         "device": done["device"].fillna("unknown")})


def complete_cells(gaps: pd.DataFrame) -> pd.DataFrame:
    """The gaps of the cells that have as many paired seeds as the fullest cell."""
    n = gaps.groupby(["params", "tokens"])["seed"].transform("nunique")
    return gaps[n == n.max()]


def grid(folder: Path) -> pd.DataFrame:
    """The jobs of the sweep in ``folder`` (``SweepDir.jobs``): one row per job in launch
    order, one column per key it sets; empty where the folder has no ``multirun.yaml``."""
    sweep = SweepDir.read(folder)
    if sweep is None:
        return pd.DataFrame()
    return pd.DataFrame([dict(o.split("=", 1) for o in job) for job in sweep.jobs()])


def pending(jobs: pd.DataFrame, folder: Path, runs: pd.DataFrame) -> pd.DataFrame:
    """How many of the ``jobs`` of the sweep in ``folder`` (``grid``) ``runs`` (collect's
    table) do not hold finished, per cell of ``CELL``, in the grid's order."""
    done = {int(m[1]) for p in runs.loc[runs["status"] == "done", "path"]
            if (m := re.match(r"(\d+)_", Path(p).relative_to(folder).parts[0]))}
    counts = jobs.drop(index=[i for i in done if i in jobs.index]) \
        .groupby(list(CELL), sort=False).size()
    return pd.DataFrame({"D/N": [c[0] for c in counts.index], "size": [c[1] for c in counts.index],
                         "runs not finished": counts.values})


Part = str | pd.DataFrame          # a paragraph, or a table to render


def section(runs: pd.DataFrame, out: Path, folder: Path) -> list[Part]:
    """The report's scaling section on the runs of the sweep in ``folder``; writes its tables
    and figures under ``out``."""
    study = study_runs(runs)
    recipes = set(study["recipe"])
    jobs = grid(folder)
    left = pending(jobs, folder, runs) if set(CELL) <= set(jobs) else None
    parts: list[Part] = ["## Scaling: the gap against tokens per parameter and model size",
                         _state(runs, study, len(jobs), left),
                         *([left] if left is not None and len(left) else [])]
    held = corner(jobs, study)
    for recipe, against in COMPARISONS:
        if {recipe, against} <= recipes:
            parts += _comparison(study, recipe, against, out, held)
    return parts


def corner(jobs: pd.DataFrame, study: pd.DataFrame) -> tuple[str, float, float] | None:
    """The grid's largest model (name, N) at its largest tokens per parameter: the cell the
    held-out check predicts. None without a grid, or while a size of it has no run (its N is
    unknown, so the largest cannot be named)."""
    if not set(CELL) <= set(jobs):
        return None
    sizes = study.groupby("size")["params"].first()
    if set(jobs["model"]) - set(sizes.index):
        return None
    size = sizes.idxmax()
    return size, float(sizes[size]), max(map(float, jobs["train.tokens_per_param"]))


def _state(runs: pd.DataFrame, study: pd.DataFrame, grid_size: int,
           left: pd.DataFrame | None) -> str:
    running = int((runs["status"] != "done").sum())
    waiting = ("no multirun.yaml to list the grid's other runs from" if left is None
               else f"{int(left['runs not finished'].sum())} of the grid's {grid_size} runs "
                    f"not finished, by cell below (pending, never estimated)" if len(left)
               else f"all of the grid's {grid_size} runs finished")
    sizes = ", ".join(f"{s} ({n:,})" for s, n in
                      study.groupby("size")["params"].first().sort_values().items())
    machines = "; ".join(f"{m} ({n} runs)" for m, n in study["device"].value_counts().items())
    return (f"{len(study)} runs finished, {running} running; {waiting}. "
            f"On {machines or 'no machine yet'}. Sizes (non-embedding "
            f"parameters N): {sizes}. Gaps are per seed, paired with the "
            f"baseline run of the same size, tokens and seed; relative = (L - L_base) / L_base, "
            f"positive = worse than the baseline. Only cells whose seeds are all finished enter.")


def _comparison(study: pd.DataFrame, recipe: str, against: str, out: Path,
                held: tuple[str, float, float] | None) -> list[Part]:
    name = f"{recipe}_vs_{against}"
    gaps = complete_cells(scaling.paired_gaps(study, recipe, against))
    head = f"### `{recipe}` against `{against}`"
    if gaps.empty:
        return [head, "No cell has both yet."]
    cells = _cells_table(gaps, study[study["recipe"].isin([recipe, against])])
    (out / "tables").mkdir(parents=True, exist_ok=True)
    cells.to_csv(out / "tables" / f"scaling_{name}_cells.csv", index=False)
    _seeds_table(gaps, recipe, against).to_csv(out / "tables" / f"scaling_{name}_seeds.csv",
                                               index=False)
    parts: list[Part] = [head, cells_md(cells),
                         f"Each seed's pair of runs: [tables/scaling_{name}_seeds.csv]"
                         f"(tables/scaling_{name}_seeds.csv)."]
    try:
        fits = {form: scaling.fit(gaps, form) for form in scaling.FORMS}
    except ValueError as err:
        return [*parts, f"No law fitted yet: {err}."]
    checks, checked = _holdout(gaps, held, out / "tables" / f"scaling_{name}_holdout.csv") \
        if held is not None else ({}, [])
    (out / "figures").mkdir(parents=True, exist_ok=True)
    for form in scaling.FORMS:
        figures.plot_gaps(gaps, fits[form], out / "figures" / f"scaling_{name}_{form}.png",
                          (recipe, against), checks.get(form))
    choice = scaling.better_form(gaps, fits["relative"], fits["absolute"])
    best = fits[choice.form]
    figures.plot_residuals(best, out / "figures" / f"scaling_{name}_residuals.png",
                           (recipe, against))
    table = pd.DataFrame([_fit_row(f) for f in fits.values()])
    table.to_csv(out / "tables" / f"scaling_{name}_fit.csv", index=False,
                 float_format=FLOAT_FORMAT)
    return [*parts, fit_md(table), in_words(table), choice.reason,
            *_extrapolation(fits, recipe, against), *checked,
            *(f"![{name} {form}](figures/scaling_{name}_{form}.png)"
              for form in [*scaling.FORMS, "residuals"])]


def _cells_table(gaps: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The cells' mean gaps and their seed intervals (``tables/scaling_*_cells.csv``): the
    numbers, unrounded, the relative gap as a fraction; and the machines the cells' ``runs``
    came from (a grid may span several)."""
    rel, ab = (scaling.cell_table(gaps, form) for form in scaling.FORMS)
    where = runs.groupby(["params", "tokens"])["device"].agg(lambda d: "; ".join(sorted(set(d))))
    return pd.DataFrame({"size": rel["size"], "N": rel["params"], "D": rel["tokens"],
                         "D/N": rel["tpp"], "seeds": rel["n"],
                         "relative": rel["mean"], "relative_lo": rel["lo"],
                         "relative_hi": rel["hi"], "absolute": ab["mean"],
                         "absolute_lo": ab["lo"], "absolute_hi": ab["hi"],
                         "machine": [where[p, t] for p, t in zip(rel["params"], rel["tokens"])]})


def cells_md(table: pd.DataFrame) -> pd.DataFrame:
    """The cells table as the report shows it; the machine column only where the cells span
    several (with one, the paragraph above names it)."""
    shown = pd.DataFrame({"size": table["size"], "N": table["N"],
                          "D/N": [f"{round(t, 2):g}" for t in table["D/N"]],   # 2.03, 10, 9.99
                          "seeds": table["seeds"],
                          "relative gap %": _ci(table, "relative", 100, 3),
                          "absolute gap (nats)": _ci(table, "absolute", 1, 4)})
    return shown.assign(machine=table["machine"]) if table["machine"].nunique() > 1 else shown


def _seeds_table(gaps: pd.DataFrame, recipe: str, against: str) -> pd.DataFrame:
    """Each seed's pair of runs in the cells (``tables/scaling_*_seeds.csv``): both final
    losses and the gaps the cells average."""
    return pd.DataFrame({"size": gaps["size"], "N": gaps["params"], "D": gaps["tokens"],
                         "D/N": gaps["tpp"], "seed": gaps["seed"],
                         f"loss_{recipe}": gaps["loss"], f"loss_{against}": gaps["loss_against"],
                         "relative": gaps["rel_gap"], "absolute": gaps["abs_gap"]})


def _ci(table: pd.DataFrame, x: str, scale: float, digits: int) -> list[str]:
    """Column ``x`` with its interval [``x_lo``, ``x_hi``], times ``scale``, signed."""
    return [f"{_signed(m * scale, digits)} [{_signed(a * scale, digits)}, "
            f"{_signed(b * scale, digits)}]"
            for m, a, b in zip(table[x], table[f"{x}_lo"], table[f"{x}_hi"])]


def _signed(x: float, digits: int) -> str:
    """``x`` to ``digits`` decimals, unless that reads 0 when it is not: a bound's side of 0
    is what an interval is read for, so it keeps two significant digits (-2.7e-05)."""
    fixed = f"{x:+.{digits}f}"
    return f"{x:+.2g}" if x and float(fixed) == 0 else fixed


def _fit_row(f: scaling.Fit) -> dict:
    """A row of the fit table (``tables/scaling_*_fit.csv``): the numbers, unrounded."""
    return {"form": f.form, "k": f.k, "a": f.a, "a_lo": f.a_ci[0], "a_hi": f.a_ci[1],
            "b": f.b, "b_lo": f.b_ci[0], "b_hi": f.b_ci[1], "rms": f.rms, "cells": f.n_cells,
            "excluded": ", ".join(f"{c.size} at {c.tpp:.3g}" for c in f.excluded) or "none"}


def fit_md(table: pd.DataFrame) -> pd.DataFrame:
    """The fit table as the report and the results index show it."""
    a, b = (_ci(table, x, 1, 3) for x in ("a", "b"))
    return pd.DataFrame({"form": table["form"], "k": [f"{k:.3g}" for k in table["k"]],
                         "a (D/N)": a, "b (N)": b,
                         "residual RMS (log)": [f"{r:.3f}" for r in table["rms"]],
                         "cells": table["cells"], "excluded (gap <= 0)": table["excluded"]})


def in_words(table: pd.DataFrame) -> str:
    """The fit table's exponents read as answers: does the gap grow with D/N, with N?"""
    return (f"In words: as training goes on (D/N) the gap {_trend(table, 'a')}; with model size "
            f"(N) it {_trend(table, 'b')}. A direction is named only where the exponent's 95% "
            f"interval excludes 0.")


_NONE = "shows no resolved trend"


def _trend(table: pd.DataFrame, x: str) -> str:
    """What both laws' intervals on the exponent ``x`` (a or b) say of its sign."""
    words = {r["form"]: _direction(r[f"{x}_lo"], r[f"{x}_hi"]) for _, r in table.iterrows()}
    if words["relative"] == words["absolute"]:
        return words["relative"] + (" under either law" if words["relative"] == _NONE
                                    else " under both laws")
    return f"{words['relative']} under the relative law and {words['absolute']} under the " \
           f"absolute one"


def _direction(lo: float, hi: float) -> str:
    return "grows" if lo > 0 else "shrinks" if hi < 0 else _NONE


def _extrapolation(fits: dict[str, scaling.Fit], recipe: str, against: str) -> list[Part]:
    """Both laws at the paper's runs, and the paper's own relative gap where it reports this
    comparison; how far each lies beyond the data (the cells are the relative law's)."""
    rows, reaches = [], [extrapolation.reach(fits["relative"], run.params, run.tokens)
                         for run in extrapolation.PAPER_RUNS]
    for run, far in zip(extrapolation.PAPER_RUNS, reaches):
        rel, ab = (scaling.extrapolate(fits[f], run.params, run.tokens) for f in scaling.FORMS)
        paper = run.rel_gap(recipe, against)
        rows.append({"paper run": run.name, "N": f"{run.params:.3g}", "D": f"{run.tokens:.3g}",
                     "D/N": f"{run.tokens / run.params:,.0f}",
                     "relative law": f"{rel.gap * 100:+.3g}% [{rel.lo * 100:.3g}, "
                                     f"{rel.hi * 100:.3g}]",
                     "paper": "—" if paper is None else f"{paper * 100:+.1f}%",
                     "absolute law (nats)": f"{ab.gap:+.3g} [{ab.lo:.3g}, {ab.hi:.3g}]",
                     "decades beyond N, D/N": f"{far.n_outside:.1f}, {far.tpp_outside:.1f}",
                     "reading": far.reading.value})
    sources = "; ".join(f"{run.name}: {run.source}" for run in extrapolation.PAPER_RUNS)
    return ["The laws at the paper's runs (N: the paper's nominal total parameters; their "
            "non-embedding counts are at most 0.2 decades lower, model/presets.py):",
            pd.DataFrame(rows),
            f"The paper's relative gap ({sources}); between two FP4 recipes, from each one's "
            "gap to BF16 in the same run (analysis/laws/extrapolation.py, PaperRun). "
            + extrapolation.trust(fits["relative"], reaches)]


def _holdout(gaps: pd.DataFrame, held: tuple[str, float, float],
             csv: Path) -> tuple[dict[str, holdout.Holdout], list[Part]]:
    """Both laws fitted without the grid's corner cell ``held`` (size, N, D/N), their
    prediction there and the cell's seeds (``holdout.check``), by form, and what the report
    says of them; the numbers go to ``csv``."""
    size, params, tpp = held
    try:
        checks = {form: holdout.check(gaps, size, params, tpp, form) for form in scaling.FORMS}
    except ValueError as err:
        return {}, [f"No held-out check of {size} at D/N {tpp:g} yet: {err}."]
    pd.DataFrame([{"form": h.form, "size": h.size, "D/N": h.tpp, "cells": h.fitted,
                   "predicted": h.predicted.gap, "predicted_lo": h.predicted.lo,
                   "predicted_hi": h.predicted.hi, "seeds": h.observed.n,
                   "observed": h.observed.mean, "observed_lo": h.observed.lo,
                   "observed_hi": h.observed.hi, "reading": h.reading}
                  for h in checks.values()]).to_csv(csv, index=False,
                                                    float_format=FLOAT_FORMAT)
    scale = {"relative": (100, "%"), "absolute": (1, " nats")}
    shown = pd.DataFrame([{
        "form": h.form, "cells fitted": h.fitted,
        "predicted (95% prediction interval)": _between(h.predicted.gap, h.predicted.lo,
                                                        h.predicted.hi, *scale[h.form]),
        "observed (seed interval)": "—" if h.observed.n == 0 else _between(
            h.observed.mean, h.observed.lo, h.observed.hi, *scale[h.form]),
        "reading": h.reading} for h in checks.values()])
    return checks, [
        f"Held out: `{size}` at D/N {tpp:g}, the grid's largest model at its longest training "
        f"and the cell nearest the paper's regime. Each law, fitted to the other cells, "
        f"predicts the cell's mean gap with an interval that adds one of the fit's residuals "
        f"to each bootstrap refit (analysis/laws/holdout.py; the diamond in the figures); the "
        f"cell's seeds, once all in, say whether the law reached it. The prediction does not "
        f"use the cell, so it is the same before and after the cell's runs finish.", shown]


def _between(mean: float, lo: float, hi: float, scale: float, unit: str) -> str:
    return f"{mean * scale:+.3g}{unit} [{lo * scale:+.3g}, {hi * scale:+.3g}]"


def index_md(folder: Path, link: str) -> list[Part]:
    """The results index's section on a published study in ``folder`` (linked as ``link``):
    how much of its pre-registered grid is in, and the laws its report fitted."""
    sweep = SweepDir.read(folder)
    params, runs, size = sweep.params, len(sweep.runs()), len(grid(folder))
    state = (f"all {size} runs of the pre-registered grid published" if runs == size else
             f"{runs} of the pre-registered grid's {size} runs published; the rest are "
             f"pending, never estimated")
    parts: list[Part] = ["## The scaling study as published (results/preregistration.md, "
                         "Scaling study)",
                         f"[{link}]({link}/report.md): {state}. Grid: "
                         + "; ".join(f"`{k}` {v}" for k, v in params.items()) + "."]
    for recipe, against in COMPARISONS:
        fit = folder / "tables" / f"scaling_{recipe}_vs_{against}_fit.csv"
        if fit.exists():
            table = pd.read_csv(fit, keep_default_na=False)
            parts += [f"`{recipe}` against `{against}`, the law gap = k (D/N)^a N^b:",
                      fit_md(table), in_words(table)]
    if len(parts) == 2:
        parts.append("No law fitted yet: it needs two tokens-per-parameter levels of two "
                     "sizes with all their seeds.")
    return parts
