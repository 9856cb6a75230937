"""The lab's answer to each claim of the paper, counted once, and what fresh seeds would buy.

Counting once. A finding of the paper is stated by one paper file (``PaperResult.stated``: a
claim another file repeats names it in ``counted_in``) and may be tested by several sweeps.
The sweep that owns it is, of those that tested it (testable, not superseded, not a run-for-run
duplicate), the first by these rules in turn (``OWNER_RULE``, also printed in the index):

1. a sweep of the ablation whose paper file states the finding;
2. on the lab scale's model (``LAB_MODEL``);
3. of the later design: a design-v2 sweep supersedes its v1 sweep;
4. listed first in the index.

Every other sweep that tested it says "counted in <owner>" and is left out of the counts.
Two design-v2 sweeps of one ablation on one model (a partial one on one machine type, a whole
rerun of the design on another, a fresh sweep of some of its claims: results/
preregistration.md, amendments 6 and 11) are never pooled: each claim is answered by the one
with more paired seeds of its two arms, and the other stays published, labelled superseded
for that claim (``supersede``).

Fresh seeds. For each answer still *not resolved*, ``to_buy`` sizes a new sweep of the claim's
two arms on the machine class the index is written on (``nvfp4-lab info``'s "machine class"):
the paired seeds for 80% power (``verdicts.seeds_needed``, from the spread of the claim's own
seeds) at ``target_gap``, the paper's gap, or, for a null, for TOST to pass at the margin when
the true gap is 0; never at the gap just observed, which would size a sweep to find what the
last one happened to see. A new sweep's seeds are all fresh: runs on another machine type are
not continued (results/preregistration.md, amendment 2). Their cost is each arm's run
estimated from the step times shipped for that class (``quant/step_times.csv``,
``cost.first_estimate``), or not given where none is shipped for an arm's format.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from ...model.presets import model_preset
from ...quant import cost
from ..inference import verdicts as v
from ..inference.stats import CLAIM_CONVENTION, CLAIM_GAP
from .claims import EARLIER, METRICS, ClaimResult, Sweep, Table
from .context import source

LAB_MODEL = "nano"          # the lab scale's model (results/preregistration.md, Lab scale)
OWNER_RULE = ("each finding of the paper is counted once, in the sweep that owns it: of the "
              "sweeps that tested it, one of the ablation whose paper file states it "
              f"(`counted_in` in another's file points there), on the lab's model ({LAB_MODEL}), "
              "of the later design (v2 supersedes v1), listed first; every other sweep that "
              "tested it says \"counted in\" its owner and is left out of the counts "
              "(`analysis/findings/answers.py`)")


def _design(sweep: Sweep) -> tuple:
    """What a sweep tests: its ablation on its models."""
    return sweep.paper.ablation, _models(sweep)


def _models(sweep: Sweep) -> tuple:
    return tuple(sorted(sweep.runs["model"].dropna().unique()))


def supersede(tested: dict[Table, list[ClaimResult]], v2: dict[Table, list[Sweep]]
              ) -> dict[Table, list[ClaimResult]]:
    """``tested`` with each design-v2 claim that another v2 sweep of the same ablation and
    model tested on more paired seeds marked with that sweep ("formats_nano (8 seeds)")."""
    design = {s.name: _design(s) for ss in v2.values() for s in ss}
    best: dict[tuple, ClaimResult] = {}
    for r in (r for t in v2 for r in tested[t] if r.test is not None):
        key = (design[r.sweep], str(r.claim))
        best[key] = max(best.get(key, r), r, key=lambda o: o.n)

    def mark(r: ClaimResult) -> ClaimResult:
        top = best.get((design[r.sweep], str(r.claim)))
        return r if r.test is None or top.n <= r.n else replace(
            r, superseded_by=f"{top.sweep} ({top.n} seeds)")

    return {t: [mark(r) for r in rs] if t in v2 else rs for t, rs in tested.items()}


def owners(tables: dict[Table, list[Sweep]], tested: dict[Table, list[ClaimResult]]
           ) -> dict[Table, list[ClaimResult]]:
    """``tested`` with every paper claim whose finding another sweep owns (``OWNER_RULE``)
    marked ``counted_in`` that sweep ("v2 formats_nano")."""
    sweeps = {(t, s.name): s for t, ss in tables.items() for s in ss}
    best: dict[str, tuple] = {}
    for order, (t, r) in enumerate((t, r) for t, rs in tested.items() for r in rs):
        if r.claim.kind != "paper" or not r.testable or r.duplicate_of or r.superseded_by:
            continue
        s = sweeps[(t, r.sweep)]
        stated = s.paper.stated(r.claim)
        rank = (not stated.startswith(f"{s.paper.ablation}: "), _models(s) != (LAB_MODEL,),
                t.design != "v2", order)
        best[stated] = min(best.get(stated, (rank, t, r)), (rank, t, r), key=lambda x: x[0])

    def mark(t: Table, r: ClaimResult) -> ClaimResult:
        if r.claim.kind != "paper" or r.duplicate_of or r.superseded_by or not r.testable:
            return r
        _, owner_t, owner = best[sweeps[(t, r.sweep)].paper.stated(r.claim)]
        return r if owner is r else replace(r, counted_in=f"{owner_t.design} {owner.sweep}")

    return {t: [mark(t, r) for r in rs] for t, rs in tested.items()}


def counted_answers(tables: dict[Table, list[Sweep]], tested: dict[Table, list[ClaimResult]],
            paper_tables: list[Table]) -> list[tuple[Sweep, ClaimResult]]:
    """The counted paper claims of ``paper_tables`` (the paper's ablations, not the sources
    beyond it), each with its sweep, in the index's order."""
    sweeps = {(t, s.name): s for t, ss in tables.items() for s in ss}
    return [(sweeps[(t, r.sweep)], r) for t in paper_tables for r in tested[t] if r.counted]


def target_gap(r: ClaimResult) -> float:
    """The gap a fresh sweep of a direction claim is sized for (amendment 10): the paper's
    gap carried to the sweep's regime where it is carried, else the equivalence margin, the
    smallest difference the lab's rule calls one; never the gap just observed."""
    return r.carried.gap if r.carried is not None else v.MARGIN_PCT


@dataclass(frozen=True)
class Purchase:
    """An unresolved claim, the fresh paired seeds it needs, and one seed's CPU seconds."""

    result: ClaimResult
    need: int | None
    seconds_per_seed: float | None

    @property
    def hours(self) -> float | None:
        if self.need is None or self.seconds_per_seed is None or self.need > v.MAX_SEEDS:
            return None
        return self.need * self.seconds_per_seed / 3600


def fresh_seeds(r: ClaimResult) -> int | None:
    """The paired seeds for 80% power at ``target_gap`` (a null: for TOST at the margin), from
    the claim's own spread."""
    if r.claim.same:
        return v.seeds_needed(0.0, r.test.sd, equivalence=True)
    return v.seeds_needed(target_gap(r), r.test.sd)


def seed_seconds(sweep: Sweep, r: ClaimResult, machine_class: str) -> float | None:
    """One fresh seed of the claim's two arms on ``machine_class``, each arm's run estimated
    from the step times shipped for that class; None where it ships none for an arm."""
    total = 0.0
    for label in (r.claim.better, r.claim.worse):
        runs = sweep.runs[sweep.runs["label"] == label]
        shape = _shape(runs, machine_class)
        est = None if shape is None else cost.first_estimate(
            shape, int(runs["steps"].median()), "auto")
        if est is None or est.machine_class != machine_class:
            return None
        total += est.seconds
    return total


def _shape(runs: pd.DataFrame, machine_class: str) -> cost.Shape | None:
    """An arm's runs as the shipped step times are matched: one thread, as the lab runs; None
    where they did not record what that needs."""
    needed = ["model", "data.vocab_size", "quant.format", "tokens", "steps"]
    if runs.empty or runs[needed].iloc[0].isna().any():
        return None
    first = runs.iloc[0]
    model = model_preset(first["model"])
    work = cost.work_per_token(model.d_model, model.n_layers, int(first["data.vocab_size"]))
    return cost.Shape(machine_class, first["quant.format"], work,
                      int(first["tokens"] // first["steps"]), 1)


def to_buy(current: list[tuple[Sweep, ClaimResult]], machine_class: str
           ) -> list[Purchase]:
    """The not-resolved claims among ``current``, cheapest to resolve first."""
    out = [Purchase(r, fresh_seeds(r), seed_seconds(s, r, machine_class))
           for s, r in current if r.verdict == "not resolved" and r.test is not None]
    return sorted(out, key=lambda p: (p.hours is None, p.hours or 0.0, str(p.result.claim)))


def to_buy_md(current: list[tuple[Sweep, ClaimResult]], machine_class: str) -> str:
    """The index's section: one row per purchase."""
    rows = [f"| {p.result.sweep} | `{p.result.claim}` | {p.result.n} | "
            f"{target_text(p.result)} | {p.result.test.sd:.2f} | {v.seeds_text(p.need) or '—'} | "
            f"{'—' if p.hours is None else f'{p.hours:.1f}'} |"
            for p in to_buy(current, machine_class)]
    if not rows:
        return ""
    return ("## What fresh seeds would buy\n\n"
            "Each paper claim whose answer is *not resolved*, cheapest first: the paired seeds "
            f"a new sweep of its two arms on this machine class ({machine_class}) needs for 80% "
            "power at the paper's gap carried to the sweep's regime where it is carried "
            f"(amendment 9), else at the margin, {v.MARGIN_PCT}% (amendment 10), or, for a "
            f"null, for TOST to pass at ±{v.MARGIN_PCT}% when the true gap is 0 — never at the "
            "gap just observed — from the spread (sd, points) of the claim's own seeds. All "
            "its seeds are fresh: runs made on another "
            "machine type are not continued. CPU hours on one core, each arm's run estimated "
            "from the step times shipped for this class (`quant/step_times.csv`; — where none "
            "is shipped for an arm's format). A design that buys some of them is "
            "pre-registered first (preregistration.md).\n\n"
            f"| sweep | claim | seeds run | target gap: claim gap {CLAIM_GAP}, % "
            f"({CLAIM_CONVENTION}) | sd | fresh seeds for 80% | CPU h |\n"
            "|---|---|---|---|---|---|---|\n" + "\n".join(rows))


def target_text(r: ClaimResult) -> str:
    """What ``fresh_seeds`` sized the claim for, in words."""
    if r.claim.same:
        return f"TOST ±{v.MARGIN_PCT}"
    return (f"margin +{v.MARGIN_PCT}" if r.carried is None else
            f"paper's, carried {target_gap(r):+.2f}")


def rule_md(by_metric: dict[str, dict[Table, list[ClaimResult]]]) -> str:
    """How the verdicts are formed, and each verdict amendments 8 and 9 changed."""
    changed = [f"| {source(t.design, r.sweep)} | `{r.claim}` | {METRICS[m]} | "
               f"{r.verdict_v2_rule or '—'} | {r.verdict_amendment8 or '—'} | {r.verdict} | "
               f"{r.size or '—'} |"
               for m, tested in by_metric.items() for t, rs in tested.items() for r in rs
               if {r.verdict_v2_rule, r.verdict_amendment8} - {"", r.verdict}]
    table = ("\n\n| sweep | claim | metric | under design v2's rule | under amendment 8 | now "
             "| on the paper's size |\n|---|---|---|---|---|---|---|\n"
             + "\n".join(changed)) if changed else ""
    return ("## How the verdicts are formed\n\n"
            "Each claim's interval uses its own spread, Student's t with n - 1 degrees of "
            "freedom; no spread is pooled across claims and no pretest picks the rule "
            "(results/preregistration.md, amendment 8). Simulated at 3 seeds, this interval "
            "covers 95% with equal spreads and 95% when one claim's spread is twice the "
            "others'; the rule it replaced (pooled where Bartlett's check passed) covers 86% "
            "there, and a spread fixed in advance 78% (`analysis/inference/coverage.py`, "
            "`analysis/inference/verdicts.py`). A null is *equivalent* when its 90% interval "
            "lies inside "
            f"±{v.MARGIN_PCT}%, even where its 95% interval excludes 0 (its notes say both). "
            f"Counting: {OWNER_RULE}. Amendment 9 retired *rules out the paper's size*: what "
            "a claim says on the paper's size is read against the paper's gap carried to the "
            "lab's regime, apart from its verdict. The verdicts published under the earlier "
            "rules stay in [claims.csv](claims.csv) (`verdict_v2_rule`, `verdict_amendment8`) "
            "and in " + ", ".join(f"[{f}]({f})" for f in EARLIER.values()) + "; those they "
            "changed:" + (table or " none."))
