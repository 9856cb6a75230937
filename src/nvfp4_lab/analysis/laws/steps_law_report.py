"""The report's section on the law refitted with steps (results/preregistration.md, Amendment
9): law S and law A on the scaling grid's and the steps-or-size study's NVFP4 gaps
(``steps_law``), both forms of S, which law is read, both laws at the paper's runs, and the
held-out cells chosen to test them (``steps_holdout``). Made only once the study has the
whole seeds it is read at: the refit is read with the study.
"""
from __future__ import annotations

import pandas as pd

from . import steps_holdout, steps_law
from .scaling import FORMS, Prediction
from .steps_vs_size_report import PLANNED_SEEDS, whole_seeds

Part = str | pd.DataFrame
SCALE = {"relative": (100, "%"), "absolute": (1, " nats")}


def section(grid: pd.DataFrame, study: pd.DataFrame, min_seeds: int = PLANNED_SEEDS,
            **fit_options) -> list[Part]:
    """The section on ``grid`` and ``study`` (collect's tables of the two folders);
    ``fit_options``: ``steps_law.fit``'s resamples, seed and mc_seeds, the plan's unless
    given."""
    head = "## The law refitted with steps (results/preregistration.md, Amendment 9)"
    seeds = whole_seeds(steps_law.svs.paired_gaps(study))
    if len(seeds) < min_seeds:
        return [head, f"The refit waits for the steps-or-size study's {min_seeds} whole seeds "
                      f"({len(seeds)} in): it is read with the study."]
    gaps = steps_law.paired_gaps(grid, study)
    try:
        fits = {(law, form): steps_law.fit(gaps, law, form, **fit_options)
                for law in steps_law.LAWS for form in FORMS}
    except ValueError as err:
        return [head, f"No law fitted: {err}."]
    reading = steps_law.read_law(fits["S", "relative"])
    return [head, _state(gaps, fits["S", "relative"]), terms_md(fits.values()),
            "Law S in tokens a step B, the same fit: g = k (D/N)^(a+c) N^(b+c) B^(-c).",
            terms_md([f for f in fits.values() if f.law == "S"], batch=True),
            f"**Law read: {reading.law}.** {reading.reason}",
            *_paper(fits), *_held_out(fits["A", "relative"], fits["S", "relative"], gaps)]


def _state(gaps: pd.DataFrame, s: steps_law.LawFit) -> str:
    per_step = ", ".join(f"{b:,}" for b in sorted(gaps["tokens_per_step"].unique()))
    excluded = ", ".join(f"{r.size} at D/N {r.tpp:.3g}, {r.tokens_per_step:,} a step"
                         for r in s.excluded.itertuples()) or "none"
    return (f"{len(gaps)} paired seeds (NVFP4 against BF16; a pair repeated bit for bit counted "
            f"once) in {len(s.cells) + len(s.excluded)} cells (size, D/N, tokens a step: "
            f"{per_step}); left out for a mean relative gap <= 0: {excluded}. Intervals: 95% "
            f"percentiles of {s.resamples} refits on seed resamples (generator seed {s.seed}; "
            f"{s.skipped} could not identify the law), each bound with its Monte-Carlo error, "
            f"the sd over generator seeds; a sign is named only where its bound clears 0 by "
            f"more than twice that error.")


def _term(t: steps_law.Term) -> str:
    sign = "" if t.name == "log k" else f", {t.direction}"
    return (f"{t.value:+.3f} [{t.lo:+.3f}, {t.hi:+.3f}] (MC {t.mc_lo:.3f}, "
            f"{t.mc_hi:.3f}{sign})")


def terms_md(fits, batch: bool = False) -> pd.DataFrame:
    """One row per law and form: each coefficient with its interval, the bounds' Monte-Carlo
    errors and its sign; ``batch``: law S's (D/N, N, B) form."""
    rows = []
    for f in fits:
        terms = f.batch_terms if batch else f.terms
        rows.append({"law": f.law, "gap": f.form, **{t.name: _term(t) for t in terms},
                     "residual RMS (log)": f"{f.rms:.3f}", "cells": len(f.cells)})
    return pd.DataFrame(rows).fillna("—")


def _between(p: Prediction) -> str:
    scale, unit = SCALE[p.form]
    return f"{p.gap * scale:+.3g}{unit} [{p.lo * scale:+.3g}, {p.hi * scale:+.3g}]"


def _paper(fits: dict) -> list[Part]:
    """Both laws, both forms, at the paper's runs at their own tokens a step."""
    at = {key: steps_law.at_paper(f) for key, f in fits.items()}
    rows = []
    for i, run in enumerate(steps_law.PAPER_RUNS):
        far = at["S", "relative"][i].reach
        paper = run.rel_gap("nvfp4", "bf16")
        rows.append({"paper run": run.name, "N": f"{run.params:.3g}", "D": f"{run.tokens:.3g}",
                     "tokens a step": f"{run.tokens_per_step:,}", "steps": f"{run.steps:,.0f}",
                     **{f"law {law}, {form}": _between(at[law, form][i].predicted)
                        for law, form in fits},
                     "paper": "—" if paper is None else f"{paper * 100:+.1f}%",
                     "decades beyond N, D/N, S": f"{far.n_outside:.1f}, {far.tpp_outside:.1f}, "
                                                 f"{far.steps_outside:.1f}",
                     "reading": far.reading.value})
    return ["Both laws at the paper's runs, at their own tokens a step (N: the paper's nominal "
            "size; intervals: the refits' percentiles, seed noise only; decades beyond the "
            "cells law S was fitted to):", pd.DataFrame(rows)]


def _held_out(a: steps_law.LawFit, s: steps_law.LawFit, gaps: pd.DataFrame) -> list[Part]:
    """The cells chosen to test the two readings, or that none separates them."""
    sel = steps_holdout.select(a, s, gaps)
    head = (f"Held out: of {len(sel.candidates)} cells not yet measured (the grid's sizes and "
            f"D/N at each tokens a step), those where law A and law S predict a "
            f"{steps_holdout.SEEDS}-seed mean gap further apart than the wider of their 95% "
            f"prediction intervals, cheapest first, at most {steps_holdout.MOST} and "
            f"{steps_holdout.BUDGET_HOURS:g} core-hours in all on {steps_holdout.MACHINE} "
            f"(costed from quant/step_times.csv).")
    if not sel.chosen:
        return [head, "No affordable cell separates the readings: none is run."]
    return [head, pd.DataFrame([{
        "size": h.cell.size, "D/N": f"{h.cell.tpp:g}",
        "tokens a step": f"{h.cell.tokens_per_step:,}", "steps": f"{h.cell.steps:,}",
        "core-hours": f"{h.hours:.2f}",
        "law A [95% PI]": _between(h.a), "law S [95% PI]": _between(h.s)} for h in sel.chosen])]
