"""Where the paper's runs lie against a fitted scaling law (``analysis/laws/scaling.py``): the runs,
the gaps the paper reports in them, and how far beyond the fitted cells each lies.

A target at N and D/N lies

    outside = max(0, log10(x / max fitted), log10(min fitted / x))

decades outside the fitted range of each, x its N or D/N (and its optimizer steps, for a law in
steps), against the fitted span log10(max / min). Inside all: an interpolation. Outside, but
by no more than the span: a short extrapolation. Further: the law is untested there, and its
bootstrap interval covers seed noise only, not a bend in the law beyond the data.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum

from ..sources.paper import load_paper
from .scaling import Fit


@dataclass(frozen=True)
class PaperRun:
    """One of the paper's runs to extrapolate to. ``params`` is the paper's nominal size: total
    parameters, not the non-embedding N the fit is in. ``arms`` maps our recipe to its label in
    the paper file ``paper`` (nvfp4_lab/paper/<paper>.yaml), whose values are that arm's gap to
    BF16 in this run; no file: the paper has no BF16 run at this size. ``tokens_per_step``:
    the run's global batch in tokens (sequences x 8192), which sets its optimizer steps."""

    name: str
    params: float
    tokens: float
    tokens_per_step: int
    paper: str | None
    arms: dict[str, str]
    source: str

    def rel_gap(self, recipe: str, against: str) -> float | None:
        """(L_recipe - L_against) / L_against as the paper reports it; None where it does not.
        From each arm's r = gap / 100 to BF16: (1 + r_recipe) / (1 + r_against) - 1."""
        if self.paper is None:
            return None
        values = load_paper(self.paper).values
        r = {"bf16": 0.0} | {ours: values[label] / 100 for ours, label in self.arms.items()}
        if recipe not in r or against not in r:
            return None
        return (1 + r[recipe]) / (1 + r[against]) - 1

    @property
    def steps(self) -> float:
        """Optimizer steps: tokens / tokens a step."""
        return self.tokens / self.tokens_per_step


PAPER_RUNS = (
    PaperRun("1.2B", 1.2e9, 1e12, 768 * 8192, "cumulative", {"nvfp4": "4_plus_sr"},
             "validation loss at 1T, Fig. 8, read off the plot"),
    PaperRun("8B", 8e9, 1e12, 768 * 8192, "formats", {"nvfp4": "nvfp4", "mxfp4": "mxfp4"},
             "training loss at 1T, Fig. 6a, stated in the text"),
    PaperRun("12B", 12e9, 10e12, 736 * 8192, None, {},
             "no BF16 run: its NVFP4 gap (Fig. 7) is to FP8"),
)


class Reading(Enum):
    """What a prediction at a target is, by how far the target lies outside the fitted cells."""

    INSIDE = "interpolation"
    SHORT = "short extrapolation"
    FAR = "far extrapolation"


@dataclass(frozen=True)
class Reach:
    """How many decades a target lies outside the fitted N and D/N (and steps, for a law in
    steps; none: 0 outside an unbounded span), and the fitted spans."""

    n_outside: float
    tpp_outside: float
    n_span: float
    tpp_span: float
    steps_outside: float = 0.0
    steps_span: float = math.inf

    @property
    def reading(self) -> Reading:
        outside = (self.n_outside, self.tpp_outside, self.steps_outside)
        if max(outside) == 0:
            return Reading.INSIDE
        if all(o <= s for o, s in zip(outside, (self.n_span, self.tpp_span, self.steps_span))):
            return Reading.SHORT
        return Reading.FAR


def _decades_outside(values, x: float) -> float:
    """Decades from ``x`` to the range of ``values`` (0 inside it)."""
    return max(0.0, math.log10(x / max(values)), math.log10(min(values) / x))


def reach(fit: Fit, params: float, tokens: float) -> Reach:
    """Decades a target (params, tokens) lies outside the fitted N and D/N, and their spans."""
    return reach_cells([c.params for c in fit.cells], [c.tpp for c in fit.cells], params, tokens)


def reach_cells(n, tpp, params: float, tokens: float, steps=None,
                target_steps: float | None = None) -> Reach:
    """``reach`` from the fitted cells' N, D/N and, for a law in steps, ``steps``."""
    out = Reach(_decades_outside(n, params), _decades_outside(tpp, tokens / params),
                _span(n), _span(tpp))
    if steps is None:
        return out
    return replace(out, steps_outside=_decades_outside(steps, target_steps),
                   steps_span=_span(steps))


def _span(values) -> float:
    return math.log10(max(values) / min(values))


def trust(fit: Fit, reaches: list[Reach]) -> str:
    """A plain sentence on how far the predictions of ``fit`` that reach so far (``reach``)
    can be trusted: the fitted spans, then what each reading among them allows."""
    readings = {r.reading for r in reaches}
    meaning = {
        Reading.INSIDE: f"an interpolation is good to about the fit's residual RMS of "
                        f"{fit.rms:.2g} in log gap",
        Reading.SHORT: "a short extrapolation (outside, by no more than the span) has an "
                       "interval that covers seed noise only, not a bend in the law beyond "
                       "the data",
        Reading.FAR: "a far extrapolation (outside by more than the span) lies where the law "
                     "is untested and its interval covers seed noise only: trust the order of "
                     "magnitude at best"}
    return (f"The fitted cells span {reaches[0].n_span:.1f} decades in N and "
            f"{reaches[0].tpp_span:.1f} in D/N; "
            + "; ".join(meaning[r] for r in Reading if r in readings) + ".")
