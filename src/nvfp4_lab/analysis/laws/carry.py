"""The paper's gap carried to the lab's regime (results/preregistration.md, Amendment 9), and
what a claim's interval says against it.

A gap g_p that the paper measured at its run (N_p, D_p, B_p: nominal size, tokens, tokens a
step) is carried to a lab sweep's (N, D, B) by the ratio of the law read for its format,

    g = g_p L(N, D, B) / L(N_p, D_p, B_p),
    L = (D/N)^a N^b S^c        (law S, S = D / B its optimizer steps; law A has no c),

so log k cancels and only the exponents carry. The carried interval is the 95% percentile of
that product over the law's bootstrap refits (``steps_law.LawFit.draws``); the error of
reading g_p off the paper's plots is not in it. NVFP4 is carried by the law the refit reads
(``steps_law.read_law``), MXFP4 by law A on the grid's MXFP4 gaps (the study ran no MXFP4). A
claim between two recipes is carried side by side, each gap to BF16 by its own law (refit i of
one beside refit i of the other), and turned into the claim's gap as the paper's numbers are:
(1 + g_b) / (1 + g_a) - 1.

Only format claims are carried: BF16 against a whole FP4 recipe, or two such recipes, in a
sweep whose paper entry is the paper run's (``extrapolation.PAPER_RUNS``: its ``arms``). The
law was fitted on those gaps, on Python-code bytes; carrying its ratio to Shakespeare bytes
assumes the corpus moves k and not the exponents. Components, techniques and placements were
never fitted: on size they read *not comparable at this scale*, as does a format claim of a
sweep whose runs recorded no transformer size (the hybrid's: the law's N is a transformer's
non-embedding count).

Size words, from the lab's 95% interval [lo, hi] and the carried one [c_lo, c_hi]: *smaller
than the paper's gap carried to the lab* (hi < c_lo), *larger than ...* (lo > c_hi), *as the
paper's, carried* (they overlap).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ...sweepdir import SweepDir
from ..inference.verdicts import GapTest
from ..sources.collect import collect
from ..sources.paper import Claim
from . import steps_law
from .extrapolation import PAPER_RUNS, PaperRun
from .scaling import LEVEL, interval
from .steps_vs_size_report import PLANNED_SEEDS, whole_seeds

SMALLER = "smaller than the paper's gap carried to the lab"
LARGER = "larger than the paper's gap carried to the lab"
AS_CARRIED = "as the paper's, carried"
NOT_COMPARABLE = "not comparable at this scale"
NO_LAW = "not carried: the law is read with the steps-or-size study"
SIZE_WORDS = (SMALLER, AS_CARRIED, LARGER, NOT_COMPARABLE, NO_LAW)
FORMATS = ("nvfp4", "mxfp4")
CORPUS = ("the law was fitted on Python-code bytes: carried as if the corpus moved k, not the "
          "exponents; the paper's reading error is not in the interval")


@dataclass(frozen=True)
class Regime:
    """Where a gap was measured: size N, tokens D and tokens a step B."""

    params: float
    tokens: float
    tokens_per_step: float

    def __str__(self) -> str:
        return (f"N {self.params / 1e6:.3g}M, {self.tokens / self.params:.3g} tokens a "
                f"parameter, {self.tokens_per_step:,.0f} tokens a step")


@dataclass(frozen=True)
class Laws:
    """The law each format's gap is carried by, and why NVFP4's is the one it is."""

    by_format: dict[str, steps_law.LawFit]
    reading: steps_law.LawReading


@dataclass(frozen=True)
class Carried:
    """The paper's claim gap (%) carried to ``regime``: point, 95% interval, and the laws."""

    paper_gap: float
    gap: float
    lo: float
    hi: float
    regime: Regime
    laws: str

    def word(self, test: GapTest) -> str:
        """The size word of a lab interval against this one."""
        if test.hi < self.lo:
            return SMALLER
        if test.lo > self.hi:
            return LARGER
        return AS_CARRIED


def _ratio(law: steps_law.LawFit, lab: Regime, paper: Regime) -> tuple[float, np.ndarray]:
    """L(lab) / L(paper) at the law's point and at each of its refits."""
    dx = (law.x(lab.params, lab.tokens, lab.tokens_per_step)
          - law.x(paper.params, paper.tokens, paper.tokens_per_step))
    point = np.array([t.value for t in law.terms])
    return float(np.exp(point @ dx)), np.exp(law.draws @ dx)


def _to_bf16(laws: Laws, run: PaperRun, recipe: str, lab: Regime
             ) -> tuple[float, np.ndarray]:
    """The paper's relative gap of ``recipe`` to BF16 (a fraction) carried: point, refits."""
    if recipe == "bf16":
        return 0.0, np.zeros(1)
    paper = Regime(run.params, run.tokens, run.tokens_per_step)
    point, draws = _ratio(laws.by_format[recipe], lab, paper)
    gap = run.rel_gap(recipe, "bf16")
    return gap * point, gap * draws


def recipes_of(claim: Claim, run: PaperRun) -> tuple[str, str] | None:
    """The claim's two labels as recipes of ``run`` (BF16 or one of its carried ``arms``);
    None where either is not a whole recipe the law covers."""
    label_to_recipe = {"bf16": "bf16"} | {lab: rec for rec, lab in run.arms.items()
                                         if rec in FORMATS}
    pair = (label_to_recipe.get(claim.better), label_to_recipe.get(claim.worse))
    return None if None in pair or pair[0] == pair[1] else pair


def paper_run(ablation: str) -> PaperRun | None:
    """The paper run whose numbers the ablation's paper entry holds."""
    return next((r for r in PAPER_RUNS if r.paper == ablation), None)


def format_pair(claim: Claim, ablation: str) -> tuple[str, str] | None:
    """The recipes of a format claim of a paper run's ablation; None for any other claim."""
    run = paper_run(ablation)
    return None if run is None or claim.same else recipes_of(claim, run)


def carry(laws: Laws, claim: Claim, ablation: str, lab: Regime,
          level: float = LEVEL) -> Carried:
    """The paper's gap of the format claim ``claim`` (``format_pair``) carried to ``lab``."""
    run, pair = paper_run(ablation), format_pair(claim, ablation)
    if pair is None:
        raise ValueError(f"{ablation}: {claim} is not a format claim of the paper's runs")
    (pa, da), (pb, db) = (_to_bf16(laws, run, r, lab) for r in pair)
    if len(da) > 1 and len(db) > 1:         # two laws: refit i beside refit i (BF16's broadcasts)
        n = min(len(da), len(db))
        da, db = da[:n], db[:n]
    draws = ((1 + db) / (1 + da) - 1) * 100
    lo, hi = interval(draws, level)
    used = " and ".join(f"{r} by law {laws.by_format[r].law}" for r in pair if r != "bf16")
    return Carried(run.rel_gap(pair[1], pair[0]) * 100, ((1 + pb) / (1 + pa) - 1) * 100,
                   float(lo), float(hi), lab, used)


def regime_of(runs: pd.DataFrame, claim: Claim) -> Regime | None:
    """A sweep's regime for ``claim``: its two arms' median size, tokens and tokens a step;
    None where their runs recorded no size."""
    mine = runs[runs["label"].isin([claim.better, claim.worse])]
    mine = mine.dropna(subset=["params", "tokens", "steps"]) if "params" in mine else mine[:0]
    if mine.empty:
        return None
    return Regime(float(mine["params"].median()), float(mine["tokens"].median()),
                  float((mine["tokens"] / mine["steps"]).median()))


def read_laws(grid: Path, study: Path, min_seeds: int = PLANNED_SEEDS,
              **fit_options) -> Laws | None:
    """The laws to carry by, from the scaling grid's and the steps-or-size study's folders;
    None where either is missing or the study has fewer than ``min_seeds`` whole seeds (the
    law is read with the study). ``fit_options``: ``steps_law.fit``'s, the plan's unless
    given."""
    if SweepDir.read(grid) is None or SweepDir.read(study) is None:
        return None
    g, s = collect([grid]).runs, collect([study]).runs
    if len(whole_seeds(steps_law.svs.paired_gaps(s))) < min_seeds:
        return None
    nv = steps_law.paired_gaps(g, s)
    s_fit = steps_law.fit(nv, "S", "relative", **fit_options)
    reading = steps_law.read_law(s_fit)
    nv_law = s_fit if reading.law == "S" else steps_law.fit(nv, "A", "relative", **fit_options)
    mx = steps_law.fit(steps_law.paired_gaps(g, s, "mxfp4"), "A", "relative", **fit_options)
    return Laws({"nvfp4": nv_law, "mxfp4": mx}, reading)
