"""The scaling law refitted with steps (results/preregistration.md, Amendment 9): is NVFP4's gap
set by the model's size or by its optimizer steps, read from the scaling grid and the
steps-or-size study together?

    A:  log g = log k + a log(D/N) + b log N
    S:  log g = log k + a log(D/N) + b log N + c log S,       S the cell's optimizer steps

Every grid run took 2048 tokens a step, so there log S = log(D/N) + log N - log 2048 and c is
not identifiable; the study's other tokens a step B separate it. As S = (D/N) N / B, law S is
also g = k (D/N)^(a+c) N^(b+c) B^(-c): one fit, both forms given (``LawFit.batch_terms``).

A cell is (size, D/N, tokens a step). The grid's gaps (its complete cells) and the study's
(its whole seeds) are combined; a pair of runs that both repeat bit for bit (same size, tokens,
tokens a step and seed, equal losses: the study's 2048-token seeds 0-2 repeat the grid's)
counts once. The fit is the grid's (``scaling.point_fit``, ``scaling.bootstrap``): least
squares on the logs of the cell means, cells with a mean <= 0 listed and left out; 95%
percentile intervals of ``RESAMPLES`` refits on inflated seed resamples, generator ``SEED``.
The Monte-Carlo error of every bound is its sd over the generator seeds ``MC_SEEDS``, and a
direction is named only where its bound clears 0 by more than twice that error. Law A is
refitted on the same cells. Law S is read where c is resolved, law A where it is not.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import steps_vs_size as svs
from .extrapolation import PAPER_RUNS, PaperRun, Reach, reach_cells
from .scaling import FORMS, LEVEL, Design, Prediction, bootstrap, cell_table, interval, levels
from .scaling import point_fit as scaling_point_fit
from .scaling_report import complete_cells
from .steps_vs_size_report import whole_seeds

RESAMPLES = 4000
SEED = 49                      # amendment 9's generator seed
MC_SEEDS = range(49, 69)
KEYS = ("params", "tokens", "tokens_per_step", "steps", "size")
LAWS = {"S": Design(KEYS, ("tpp", "params", "steps"), ("k", "a", "b", "c")),
        "A": Design(KEYS, ("tpp", "params"), ("k", "a", "b"))}
# (log k, a, b, c) -> (log k, a + c, b + c, -c): law S in (D/N, N, B)
TO_BATCH = np.array([[1, 0, 0, 0], [0, 1, 0, 1], [0, 0, 1, 1], [0, 0, 0, -1]], dtype=float)
BATCH_NAMES = ("log k", "a + c (D/N)", "b + c (N)", "-c (B)")
NOT_RESOLVED = "not resolved"
_REPEAT = ["size", "tokens", "tokens_per_step", "seed"]


def _gaps(runs: pd.DataFrame, recipe: str, against: str) -> pd.DataFrame:
    """``steps_vs_size.paired_gaps`` with each pair's tokens and D/N."""
    g = svs.paired_gaps(runs, recipe, against)
    tokens = g["steps"] * g["tokens_per_step"]
    return g.assign(tokens=tokens, tpp=tokens / g["params"])


def paired_gaps(grid: pd.DataFrame, study: pd.DataFrame, recipe: str = "nvfp4",
                against: str = "bf16") -> pd.DataFrame:
    """The grid's paired gaps in its complete cells and the study's in its whole seeds
    (``grid``, ``study``: collect's tables), each repeated pair once (``once``)."""
    g, s = _gaps(grid, recipe, against), _gaps(study, recipe, against)
    return once(pd.concat([complete_cells(g), s[s["seed"].isin(whole_seeds(s))]]))


def once(gaps: pd.DataFrame) -> pd.DataFrame:
    """``gaps`` with each pair that repeats bit for bit counted once; ValueError, naming the
    pair, where one size, tokens, tokens a step and seed have pairs whose losses differ."""
    unique = gaps.drop_duplicates([*_REPEAT, "loss", "loss_against"])
    clash = unique[unique.duplicated(_REPEAT, keep=False)]
    if len(clash):
        r = clash.iloc[0]
        same = clash[(clash[_REPEAT] == r[_REPEAT]).all(axis=1)]
        raise ValueError(f"{r['size']} at {r['tokens']:,} tokens, {r['tokens_per_step']} a "
                         f"step, seed {r['seed']} has pairs whose losses differ (NVFP4 "
                         f"{list(same['loss'])}, BF16 {list(same['loss_against'])}): a repeat "
                         f"must equal its first run bit for bit; find out why before fitting")
    return unique.sort_values(["params", "tpp", "tokens_per_step", "seed"]).reset_index(drop=True)


def direction(lo: float, hi: float, mc_lo: float, mc_hi: float) -> str:
    """The sign an interval names: positive or negative only where its bound clears 0 by more
    than twice that bound's Monte-Carlo error; else not resolved."""
    if lo > 2 * mc_lo:
        return "positive"
    if hi < -2 * mc_hi:
        return "negative"
    return NOT_RESOLVED


@dataclass(frozen=True)
class Term:
    """One coefficient (``log k`` for k): its value, 95% interval and each bound's
    Monte-Carlo error."""

    name: str
    value: float
    lo: float
    hi: float
    mc_lo: float
    mc_hi: float

    @property
    def direction(self) -> str:
        return direction(self.lo, self.hi, self.mc_lo, self.mc_hi)


@dataclass(frozen=True)
class LawFit:
    """Law ``law`` fitted to the ``form`` gap of the ``cells`` (``scaling.cell_table`` rows with
    a positive mean; ``excluded``: the others). ``terms``: log k, a, b (and c); ``batch_terms``:
    law S in (D/N, N, B), empty for A. ``draws``: the refits of generator ``seed``."""

    law: str
    form: str
    terms: tuple[Term, ...]
    batch_terms: tuple[Term, ...]
    cells: pd.DataFrame = field(compare=False)
    excluded: pd.DataFrame = field(compare=False)
    residuals: tuple[float, ...]
    rms: float
    resamples: int
    skipped: int
    seed: int
    draws: np.ndarray = field(compare=False, repr=False)

    def term(self, name: str) -> Term:
        return next(t for t in self.terms if t.name == name)

    def x(self, params: float, tokens: float, tokens_per_step: float) -> np.ndarray:
        """The law's regressors (1, log D/N, log N[, log S]) at one point."""
        point = {"params": [params], "tpp": [tokens / params],
                 "steps": [tokens / tokens_per_step]}
        return LAWS[self.law].x(pd.DataFrame(point))[0]

    def at(self, params: float, tokens: float, tokens_per_step: float,
           level: float = LEVEL) -> Prediction:
        """The law's gap there and the percentile interval of its refits' gaps."""
        x = self.x(params, tokens, tokens_per_step)
        lo, hi = np.exp(interval(self.draws @ x, level))
        gap = float(np.exp(np.array([t.value for t in self.terms]) @ x))
        return Prediction(self.form, params, tokens, gap, float(lo), float(hi))


def _terms(names, value: np.ndarray, draws: np.ndarray, others: list[np.ndarray],
           level: float) -> tuple[Term, ...]:
    """Terms from the point ``value``, the ``draws`` read and the refits of each Monte-Carlo
    seed (``others``), the bounds' errors their sd over those seeds."""
    lo, hi = interval(draws, level)
    err_lo, err_hi = np.array([interval(d, level) for d in others]).std(axis=0, ddof=1)
    return tuple(Term(row[0], *map(float, row[1:]))
                 for row in zip(names, value, lo, hi, err_lo, err_hi))


def _check_batches(table: pd.DataFrame) -> None:
    """ValueError where the cells with a positive mean took one tokens a step: then log S =
    log(D/N) + log N - log B is collinear with the other regressors and c has no value."""
    used = table[table["mean"] > 0]
    if levels(np.log(used["tokens_per_step"].to_numpy(float))) < 2:
        took = ", ".join(map(str, sorted(set(used["tokens_per_step"]))))
        raise ValueError(f"c is not identifiable: every cell with a positive mean gap took "
                         f"{took} tokens a step, so log S moves only with D/N and N; law S "
                         f"needs cells at two or more tokens a step")


def fit(gaps: pd.DataFrame, law: str, form: str, resamples: int = RESAMPLES, seed: int = SEED,
        mc_seeds: range = MC_SEEDS, level: float = LEVEL) -> LawFit:
    """Law ``law`` ("A" or "S") fitted to the ``form`` gap of ``gaps`` (``paired_gaps``), its
    intervals from generator ``seed`` and their Monte-Carlo errors over ``mc_seeds``."""
    design = LAWS[law]
    table = cell_table(gaps, form, level, design)
    if law == "S":
        _check_batches(table)
    p = scaling_point_fit(table, design)
    runs = {s: bootstrap(gaps, FORMS[form], resamples, s, design) for s in {seed, *mc_seeds}}
    others = [runs[s] for s in mc_seeds]
    names = ("log k", *design.names[1:])
    batch = () if law == "A" else _terms(BATCH_NAMES, TO_BATCH @ p.coef, runs[seed] @ TO_BATCH.T,
                                         [d @ TO_BATCH.T for d in others], level)
    return LawFit(law, form, _terms(names, p.coef, runs[seed], others, level), batch, p.used,
                  p.dropped, tuple(map(float, p.residuals)),
                  float(np.sqrt(np.mean(p.residuals ** 2))), resamples,
                  resamples - len(runs[seed]), seed, runs[seed])


@dataclass(frozen=True)
class LawReading:
    """Which law is read ("S" or "A") and why."""

    law: str
    reason: str


def read_law(s: LawFit) -> LawReading:
    """S where its c is resolved by the direction rule, else A (amendment 9, which law is
    read); ``s``: law S fitted to the relative gap, the primary form."""
    if (s.law, s.form) != ("S", "relative"):
        raise ValueError(f"the law is read from law S on the relative gap, got law {s.law} on "
                         f"the {s.form} gap")
    c = s.term("c")
    said = (f"c = {c.value:+.3f} [{c.lo:+.3f}, {c.hi:+.3f}] (Monte-Carlo error of the bounds "
            f"{c.mc_lo:.3f}, {c.mc_hi:.3f})")
    if c.direction != NOT_RESOLVED:
        return LawReading("S", f"{said} clears 0 by more than twice its Monte-Carlo error: the "
                               f"gap moves with the optimizer steps at a fixed size and D/N, "
                               f"so law S is read.")
    return LawReading("A", f"{said} does not clear 0 by more than twice its Monte-Carlo error: "
                           f"law A is read, and its b as an effect of size, with the note that "
                           f"steps were tested and did not separate from size at this power.")


@dataclass(frozen=True)
class AtPaper:
    """A law at one of the paper's runs, and how far beyond the fitted cells that lies."""

    run: PaperRun
    predicted: Prediction
    reach: Reach


def at_paper(law: LawFit, level: float = LEVEL) -> list[AtPaper]:
    """``law`` at each of the paper's runs at its own tokens a step, with the decades beyond
    the fitted N, D/N and (law S) steps."""
    cells = law.cells
    steps = cells["steps"] if law.law == "S" else None
    return [AtPaper(run, law.at(run.params, run.tokens, run.tokens_per_step, level),
                    reach_cells(cells["params"], cells["tpp"], run.params, run.tokens,
                                steps, run.steps)) for run in PAPER_RUNS]
