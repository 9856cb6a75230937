"""The held-out test of the law refitted with steps (results/preregistration.md, Amendment 9):
the cells this machine type can run where law A and law S (``steps_law``) predict mean gaps
further apart than the wider of their two prediction intervals, chosen before any of them runs.

A candidate is a cell (size, D/N, tokens a step) of the scaling grid's sizes and D/N
(``conf/ablation/scaling.yaml``) at each tokens a step of ``conf/tokens_per_step/``, not yet
measured. Its cost: ``SEEDS`` paired seeds of a BF16 and an NVFP4 run, each estimated from the
step times shipped for the plan's machine class (``quant/step_times.csv``,
``cost.first_estimate``; one thread, as the lanes run), in core-hours. A law's 95% prediction
interval for the mean of ``SEEDS`` seeds adds to each bootstrap refit's gap there the mean of
``SEEDS`` deviations drawn with replacement from the seed gaps of the nearest measured cell
(in decades of N, D/N and tokens a step; inflated as ``scaling.inflated``, centred on 0),
generator (the law's seed, 1). Chosen: the cells that separate the laws, cheapest first, at
most ``MOST``, while their cost in all stays within ``BUDGET_HOURS``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...configs import default_option, option_settings
from ...model.presets import model_preset
from ...quant import cost
from .holdout import in_cell
from .scaling import FORMS, LEVEL, Prediction, inflated, interval
from .steps_law import LawFit

MACHINE = "x86_64 AVX512, AMD family 25"     # the plan's machine type
SEEDS = 6
BUDGET_HOURS = 6.0
MOST = 4
DATA = "pycode_bytes"                          # the grid's corpus: its vocabulary sizes a step


@dataclass(frozen=True)
class Candidate:
    """A cell that could be run: ``size`` (N = ``params``) trained to ``tpp`` tokens a
    parameter in ``tokens_per_step`` tokens a step, in whole steps as a run trains."""

    size: str
    params: int
    tpp: float
    tokens_per_step: int

    @property
    def steps(self) -> int:
        return math.ceil(self.tpp * self.params / self.tokens_per_step)

    @property
    def tokens(self) -> int:
        return self.steps * self.tokens_per_step


def family() -> list[Candidate]:
    """Every size and D/N of the scaling grid at every tokens a step of the config tree."""
    sweep = option_settings("ablation")["scaling"]["hydra"]["sweeper"]["params"]
    seq_len = option_settings("train")[default_option("train")]["seq_len"]
    per_step = sorted(o["train"]["batch_size"] * seq_len
                      for o in option_settings("tokens_per_step").values())
    return [Candidate(size, model_preset(size).non_embedding_params(), float(tpp), b)
            for size in sweep["model"].split(",")
            for tpp in sweep["train.tokens_per_param"].split(",") for b in per_step]


def core_hours(cell: Candidate, machine: str = MACHINE, seeds: int = SEEDS) -> float:
    """``seeds`` paired BF16 and NVFP4 runs of ``cell`` on ``machine``, from the shipped step
    times; ValueError where none is shipped for a format on that machine class."""
    model = model_preset(cell.size)
    vocab = option_settings("data")[DATA]["vocab_size"]
    work = cost.work_per_token(model.d_model, model.n_layers, vocab)
    total = 0.0
    for fmt in ("bf16", "nvfp4"):
        shape = cost.Shape(machine, fmt, work, cell.tokens_per_step, 1)
        est = cost.first_estimate(shape, cell.steps, "auto")
        if est is None or est.machine_class != machine:
            raise ValueError(f"no {fmt} step time shipped for {machine!r} in "
                             f"quant/step_times.csv: the cells cannot be costed there")
        total += est.seconds
    return seeds * total / 3600


def nearest(gaps: pd.DataFrame, cell: Candidate) -> pd.DataFrame:
    """The seed gaps of the measured cell nearest ``cell`` in decades of N, D/N and tokens a
    step (the first in ``gaps``' order on a tie)."""
    keys = ["params", "tokens", "tokens_per_step"]
    cells = gaps[keys].drop_duplicates()
    far = (np.log10(cells["params"] / cell.params) ** 2
           + np.log10(cells["tokens"] / cells["params"] / cell.tpp) ** 2
           + np.log10(cells["tokens_per_step"] / cell.tokens_per_step) ** 2)
    best = cells.loc[far.idxmin()]
    return gaps[(gaps[keys] == best).all(axis=1)]


def predict_mean(law: LawFit, gaps: pd.DataFrame, cell: Candidate, seeds: int = SEEDS,
                 level: float = LEVEL) -> Prediction:
    """``law``'s gap at ``cell`` and the interval at ``level`` for the mean of ``seeds`` new
    seeds there (module docstring)."""
    spread = nearest(gaps, cell)[FORMS[law.form]].to_numpy(float)
    deviations = inflated(spread) - spread.mean()
    rng = np.random.default_rng([law.seed, 1])
    noise = deviations[rng.integers(0, deviations.size, (len(law.draws), seeds))].mean(axis=1)
    x = law.x(cell.params, cell.tokens, cell.tokens_per_step)
    lo, hi = interval(np.exp(law.draws @ x) + noise, level)
    gap = law.at(cell.params, cell.tokens, cell.tokens_per_step, level).gap
    return Prediction(law.form, cell.params, cell.tokens, gap, float(lo), float(hi))


@dataclass(frozen=True)
class HeldOut:
    """A candidate, its cost and each law's prediction of its mean gap."""

    cell: Candidate
    hours: float
    a: Prediction
    s: Prediction

    @property
    def apart(self) -> float:
        return abs(self.a.gap - self.s.gap)

    @property
    def wider(self) -> float:
        return max(self.a.hi - self.a.lo, self.s.hi - self.s.lo)

    @property
    def separates(self) -> bool:
        return self.apart > self.wider


@dataclass(frozen=True)
class Selection:
    """Every unmeasured candidate, cheapest first, and those chosen to run."""

    candidates: tuple[HeldOut, ...]
    chosen: tuple[HeldOut, ...]


def select(a: LawFit, s: LawFit, gaps: pd.DataFrame, cells: list[Candidate] | None = None,
           machine: str = MACHINE, budget: float = BUDGET_HOURS, most: int = MOST) -> Selection:
    """The held-out cells for law ``a`` (A) against law ``s`` (S), both fitted to one form of
    ``gaps`` (``steps_law.paired_gaps``), from ``cells`` (default: ``family``)."""
    if (a.law, s.law) != ("A", "S") or a.form != s.form:
        raise ValueError(f"select takes law A and law S of one form, got {a.law} "
                         f"({a.form}) and {s.law} ({s.form})")
    fresh = [c for c in (family() if cells is None else cells)
             if not (in_cell(gaps, c.size, c.tpp) & (gaps["tokens_per_step"] == c.tokens_per_step)
                     ).any()]
    rows = sorted((HeldOut(c, core_hours(c, machine), predict_mean(a, gaps, c),
                           predict_mean(s, gaps, c)) for c in fresh), key=lambda h: h.hours)
    chosen, spent = [], 0.0
    for h in rows:
        if h.separates and len(chosen) < most and spent + h.hours <= budget:
            chosen.append(h)
            spent += h.hours
    return Selection(tuple(rows), tuple(chosen))
