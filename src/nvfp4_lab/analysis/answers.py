"""The lab's current answer to each claim, and what more seeds of it would buy.

A claim's current answer is its latest design's: where a design-v2 sweep of the same ablation
on the same model tested a v1 claim again, that result replaces v1's (the headline of
results/README.md counts them). For each answer still *not resolved*, ``to_buy`` gives the
paired seeds 80% power needs (``verdicts.seeds_needed``, from the spread its verdict used):
at the paper's gap for a direction (at the measured gap where the paper gives no number), for
TOST to pass for a null. Then the seeds that adds to those run and their CPU time: one seed of
the claim's two arms costs the median wall time of each arm's runs in its sweep, on that
sweep's machine and beside whatever else ran there, so the hours are an estimate of the same
kind, not a measurement of the new runs.

Two design-v2 sweeps of one ablation on one model (a partial one on one machine type, a whole
rerun of the design on another: results/preregistration.md, amendment 6) are never pooled:
the one with more seeds is the answer and the other stays published, labelled as superseded
(``superseding``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from . import verdicts as v
from .claims import ClaimResult, Sweep, Table


def _design(sweep: Sweep) -> tuple:
    """What a sweep tests: its ablation on its models."""
    return sweep.paper.ablation, tuple(sorted(sweep.runs["model"].dropna().unique()))


def _key(sweep: Sweep, r: ClaimResult) -> tuple:
    return *_design(sweep), str(r.claim)


def _seeds(sweep: Sweep) -> int:
    return int(sweep.runs["seed"].nunique())


def superseding(v2: dict[Table, list[Sweep]]) -> dict[str, Sweep]:
    """Each design-v2 sweep that another of the same ablation and model with more seeds
    replaces, with that one (the most seeds of the group)."""
    sweeps = [s for ss in v2.values() for s in ss]
    out = {}
    for s in sweeps:
        best = max((o for o in sweeps if _design(o) == _design(s)), key=_seeds)
        if _seeds(best) > _seeds(s):
            out[s.name] = best
    return out


def supersede(tested: dict[Table, list[ClaimResult]], replaced: dict[str, Sweep]
              ) -> dict[Table, list[ClaimResult]]:
    """``tested`` with the claims of each replaced sweep marked with the sweep replacing it."""
    return {t: [replace(r, superseded_by=f"{replaced[r.sweep].name} "
                                         f"({_seeds(replaced[r.sweep])} seeds)")
                if r.sweep in replaced else r for r in rs] for t, rs in tested.items()}


def current_answers(tables: dict[Table, list[Sweep]], tested: dict[Table, list[ClaimResult]],
                    v1: Table, v2: list[Table]) -> list[tuple[Sweep, ClaimResult]]:
    """Each claim of table ``v1`` at its latest design, with its sweep: a claim tested again by
    a table of ``v2`` (the same ablation, the same model) takes that result; a claim whose arms
    that table did not run keeps v1's."""
    def pair(t: Table, r: ClaimResult) -> tuple[Sweep, ClaimResult]:
        return next(s for s in tables[t] if s.name == r.sweep), r

    latest = {_key(*pair(v1, r)): pair(v1, r) for r in tested[v1]}
    for t in v2:
        latest.update({k: pair(t, r) for r in tested[t] if r.test is not None
                       and not r.superseded_by and (k := _key(*pair(t, r))) in latest})
    return list(latest.values())


@dataclass(frozen=True)
class Purchase:
    """An unresolved claim, the paired seeds it needs, and one seed's CPU seconds."""

    result: ClaimResult
    need: int | None
    seconds_per_seed: float | None

    @property
    def more(self) -> int | None:
        return None if self.need is None else max(self.need - self.result.n, 0)

    @property
    def hours(self) -> float | None:
        if self.more is None or self.seconds_per_seed is None or self.need > v.MAX_SEEDS:
            return None
        return self.more * self.seconds_per_seed / 3600


def seconds_per_seed(sweep: Sweep, r: ClaimResult) -> float | None:
    """The median wall seconds of each of the claim's two arms in its sweep, summed."""
    runs = sweep.runs.dropna(subset=["wall_seconds"])
    medians = [runs.loc[runs["label"] == lb, "wall_seconds"].median()
               for lb in (r.claim.better, r.claim.worse)]
    return None if any(m != m for m in medians) else float(sum(medians))


def to_buy(current: list[tuple[Sweep, ClaimResult]]) -> list[Purchase]:
    """The not-resolved paper claims among ``current``, cheapest to resolve first."""
    out = [Purchase(r, r.seeds_measured if r.claim.same or r.seeds_paper is None
                    else r.seeds_paper, seconds_per_seed(s, r)) for s, r in current
           if r.verdict == "not resolved" and r.claim.kind == "paper" and r.once]
    return sorted(out, key=lambda p: (p.hours is None, p.hours or 0.0, str(p.result.claim)))


def to_buy_md(current: list[tuple[Sweep, ClaimResult]]) -> str:
    """The index's section: one row per purchase."""
    rows = [f"| {p.result.sweep} | `{p.result.claim}` | {p.result.n} | "
            f"{v.seeds_text(p.need) or '-'}{' (TOST)' if p.result.claim.same else ''} | "
            f"{v.seeds_text(p.more) or '-'} | "
            f"{'-' if p.hours is None else f'{p.hours:.1f}'} |" for p in to_buy(current)]
    if not rows:
        return ""
    return ("## What more seeds would buy\n\n"
            "Each paper claim whose current answer is *not resolved*, cheapest first: the "
            "paired seeds for 80% power at the paper's gap (at the measured gap where the "
            "paper gives none; for TOST to pass for a null), from the spread its verdict "
            "used; the seeds that adds; and their CPU hours on one core, from the median wall "
            "time of the claim's two arms in its sweep (`analysis/answers.py`). A design "
            "that buys some of them is pre-registered first (preregistration.md).\n\n"
            "| sweep | claim | seeds run | seeds for 80% | more seeds | CPU h |\n"
            "|---|---|---|---|---|---|\n" + "\n".join(rows))
