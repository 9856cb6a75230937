"""Every claim of a set of published sweeps tested together: per-claim gaps, verdicts,
multiplicity, the seeds each claim needs, and which claims count in a headline.

A sweep's claims come from its paper entry (``paper.load_paper``: the paper's claims, its size
claims, the lab's own). Each is tested on the paired gaps of ``metric`` between its two labels
(``claim_gaps``), on its own spread, with the arithmetic of ``verdicts``. Testing them
*together* is what makes two things possible: Holm and Benjamini-Hochberg over every tested
claim, and one verdict per computation: a claim whose per-seed losses equal, bit for bit, those
of a claim listed before it (the same runs reached through two ablations) is a duplicate, takes
that claim's verdict and is not counted again.

A claim counts in a headline when it is the paper's (not a size, not ours), testable (its arms
ran and differ), not a duplicate, not superseded by a larger sweep of the same claims
(``answers.superseding``) and not counted in another sweep that owns it (``answers.owners``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ...sweepdir import SweepDir
from ..inference import verdicts as v
from ..inference.stats import paired_gaps
from ..laws import carry
from ..sources import machines
from ..sources.collect import collect
from ..sources.paper import Claim, PaperResult, load_paper

PRIMARY = "final_val_loss"   # the verdicts' metric; the others are secondary
METRICS = {PRIMARY: "final validation loss",
           "tail_train_loss": "train loss averaged over the last 10% of steps"}
# results/: each claim's verdict as published under an earlier rule, kept when an amendment
# replaced it: design v2's (pooled where Bartlett's check passed; a null's 95% interval before
# its TOST), replaced by amendment 8; amendment 8's (with *rules out the paper's size*),
# replaced by amendment 9
EARLIER = {"verdict_v2_rule": "verdicts_v2_rule.csv",
           "verdict_amendment8": "verdicts_amendment8.csv"}


@dataclass(frozen=True)
class Table:
    """One table of the results index: its design ("v1", "beyond", "v2") and, for a design-v2
    table, its folder under results/v2/ (each is one model, with its own comparison classes)."""

    design: str
    folder: str | None = None

    def __str__(self) -> str:
        return self.design if self.folder is None else f"{self.design} {self.folder}"


@dataclass(frozen=True)
class Sweep:
    """One published sweep: its folder, its paper entry, its runs and what diverged."""

    folder: Path
    paper: PaperResult
    runs: pd.DataFrame
    diverged: frozenset[str]
    late: dict[str, str]          # label -> "800 of 816": runs last evaluated before their end

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def machine(self) -> str:
        """Its runs' machine class ("x86_64 AVX512, AMD family 25"; "mixed: ..." where they
        span several: ``machines.label``)."""
        return machines.label(self.runs.get("machine_class", ()))

    def bf16(self, label: str) -> bool:
        return bool((self.runs.loc[self.runs["label"] == label, "recipe"] == "bf16").any())


def load_sweep(folder: Path, paper_dir: Path | None = None) -> Sweep:
    """A published sweep; its paper entry is named by its multirun.yaml's ``name``."""
    sweep = SweepDir.read(folder)
    name = (sweep and sweep.name) or folder.name
    paper = load_paper(name, paper_dir)
    if paper is None:
        raise ValueError(f"{folder}: no paper entry nvfp4_lab/paper/{name}.yaml")
    coll = collect([folder])
    div = coll.skipped[coll.skipped["status"] == "diverged"]["label"].dropna()
    return Sweep(folder, paper, coll.runs, frozenset(set(div) - set(coll.runs["label"])),
                 _late(coll.runs, coll.curves))


def _late(runs: pd.DataFrame, curves: pd.DataFrame) -> dict[str, str]:
    """Labels whose runs' last validation came before their last step (runs made before a
    run always evaluated at its end): their final_val_loss is that earlier step's."""
    last = curves.dropna(subset=["val_loss"]).groupby("run")["step"].max()
    out = {}
    for r in runs.itertuples():
        if r.run in last and pd.notna(r.steps) and last[r.run] < r.steps:
            out[r.label] = f"{int(last[r.run])} of {int(r.steps)}"
    return out


@dataclass(frozen=True)
class ClaimResult:
    """One claim of one sweep tested (``test`` is None where no interval could be formed)."""

    sweep: str
    claim: Claim
    verdict: str
    gaps: tuple[float, ...] = ()
    test: v.GapTest | None = None
    paper_gap: float | None = None
    p: float = math.nan
    p_holm: float = math.nan
    p_bh: float = math.nan
    note: str = ""
    duplicate_of: str = ""
    superseded_by: str = ""     # a larger sweep of the same claims (answers.superseding)
    counted_in: str = ""        # the sweep that owns the paper claim (answers.owners)
    verdict_v2_rule: str = ""   # as published under design v2's pooled rule (``earlier``)
    verdict_amendment8: str = ""   # as published under amendment 8's words (``earlier``)
    carried: carry.Carried | None = None   # the paper's gap carried to the sweep's regime
    size: str = ""              # on the paper's size: a ``carry`` word, "" without a paper gap
    key: tuple = ()

    @property
    def n(self) -> int:
        return len(self.gaps)

    @property
    def testable(self) -> bool:
        return self.verdict not in ("not testable", "not run")

    @property
    def counted(self) -> bool:
        return self.claim.kind == "paper" and self.testable and self.once

    @property
    def once(self) -> bool:
        """Not the same computation as a claim before it, nor replaced by a larger sweep, nor
        counted in the sweep that owns it."""
        return not self.duplicate_of and not self.superseded_by and not self.counted_in

    @property
    def holm_survives(self) -> bool:
        return self.verdict in v.RESOLVED and self.p_holm < v.ALPHA

    @property
    def bh_survives(self) -> bool:
        return self.verdict in v.RESOLVED and self.p_bh < v.ALPHA


def claim_gaps(runs: pd.DataFrame, claim: Claim, metric: str) -> pd.DataFrame:
    """Per paired seed, the claim's gap (b - a) / a x 100 of ``metric`` (``CLAIM_GAP``), a its
    left label and b its right (positive: b has the higher loss, as ``a < b`` says; the gap to
    a baseline a): seed, baseline_value (a's), value (b's), gap."""
    pairs = paired_gaps(runs, claim.better, metric)
    mine = pairs[pairs["label"] == claim.worse]
    return mine[["seed", "baseline_value", "value"]].assign(gap=mine["gap_pct"])


def _first(sweep: Sweep, claim: Claim, metric: str) -> ClaimResult:
    """A claim before its test: its gaps, or the verdict that needs none."""
    labels = set(sweep.runs["label"])
    missing = [lb for lb in (claim.better, claim.worse)
               if lb not in labels and lb not in sweep.diverged]
    base = ClaimResult(sweep.name, claim, "not run", paper_gap=sweep.paper.gap(claim))
    if missing:
        return replace(base, note=f"no runs of {', '.join(missing)}")
    div = sweep.diverged & {claim.better, claim.worse}
    if div:
        word = ("not resolved" if len(div) == 2 else "reproduced"
                if claim.worse in div and not claim.same else "contradicted")
        return replace(base, verdict=word, note=f"diverged: {', '.join(sorted(div))}")
    mine = claim_gaps(sweep.runs, claim, metric)
    key = tuple(zip(mine["seed"], mine["baseline_value"], mine["value"]))
    values = tuple(mine["gap"])
    if v.degenerate(np.array(values)):
        return replace(base, verdict="not testable", gaps=values, key=key,
                       note="the two arms are bit-identical at this scale")
    word = "too few seeds" if len(values) < 2 else "pending"
    late = "; ".join(f"{lb} last evaluated at step {sweep.late[lb]}"
                     for lb in (claim.better, claim.worse) if lb in sweep.late)
    return replace(base, verdict=word, gaps=values, key=key, note=late)


def _tested(r: ClaimResult) -> ClaimResult:
    test = v.gap_test(np.array(r.gaps))
    word = v.verdict(r.claim.same, test)
    note = "; ".join(n for n in (v.note(r.claim.same, word, test), r.note) if n)
    return replace(r, test=test, verdict=word, note=note,
                   p=v.verdict_p(r.claim.same, word, test))


def evaluate(tables: dict[Table, list[Sweep]], metric: str = "final_val_loss"
             ) -> dict[Table, list[ClaimResult]]:
    """Test every claim of every sweep, table by table, each on its own spread; Holm and BH
    over all tested claims of all tables; a paper claim with the per-seed losses of one listed
    before it takes that one's verdict (``_once``). The results by table, in the sweeps' and
    claims' order."""
    first = {t: [_first(s, c, metric) for s in sweeps for c in s.paper.claims]
             for t, sweeps in tables.items()}
    results = {t: [_tested(r) if r.verdict == "pending" else r for r in rs]
               for t, rs in first.items()}
    results = _once(results)
    tested = [r for rs in results.values() for r in rs if r.test is not None]
    p = [r.p for r in tested]
    adjusted = dict(zip(map(id, tested), zip(v.holm(p), v.bh(p))))
    nan = (math.nan, math.nan)
    return {t: [replace(r, **dict(zip(("p_holm", "p_bh"), adjusted.get(id(r), nan))))
                for r in rs] for t, rs in results.items()}


def _once(results: dict[Table, list[ClaimResult]]) -> dict[Table, list[ClaimResult]]:
    """Each paper claim whose per-seed losses equal those of a paper claim of the same kind
    (``<`` or ``~``) listed before it, marked ``duplicate_of`` that one and given its verdict
    and p: the same runs, one verdict, counted once."""
    first_of: dict[tuple, ClaimResult] = {}
    out = {}
    for t, rs in results.items():
        out[t] = []
        for r in rs:
            same_runs = (r.key, r.claim.same)
            orig = first_of.setdefault(same_runs, r) if r.key and r.claim.kind == "paper" else r
            out[t].append(r if orig is r else replace(
                r, verdict=orig.verdict, p=orig.p, duplicate_of=f"{orig.sweep}: {orig.claim}"))
    return out


def earlier(tested: dict[Table, list[ClaimResult]], results: Path, metric: str
            ) -> dict[Table, list[ClaimResult]]:
    """``tested`` with each claim's verdict under each earlier rule (``EARLIER``), where one
    was published for it on ``metric``."""
    for column, name in EARLIER.items():
        if not (results / name).is_file():
            continue
        old = pd.read_csv(results / name)
        old = old[old["metric"] == metric]
        words = dict(zip(zip(old["table"], old["sweep"], old["claim"]), old["verdict"]))
        tested = {t: [replace(r, **{column: words.get((t.design, r.sweep, str(r.claim)), "")})
                      for r in rs] for t, rs in tested.items()}
    return tested


def carried(tables: dict[Table, list[Sweep]], tested: dict[Table, list[ClaimResult]],
            laws: carry.Laws | None) -> dict[Table, list[ClaimResult]]:
    """``tested`` with what each direction claim with a paper gap says on the paper's size:
    a format claim against the paper's gap carried to its sweep (``carry``), the rest not
    comparable at this scale; with no ``laws`` (the law not read yet), none is carried."""
    sweeps = {(t, s.name): s for t, ss in tables.items() for s in ss}

    def size(t: Table, r: ClaimResult) -> ClaimResult:
        if r.test is None or r.claim.same or r.paper_gap is None:
            return r
        s = sweeps[(t, r.sweep)]
        if carry.format_pair(r.claim, s.paper.ablation) is None:
            return replace(r, size=carry.NOT_COMPARABLE)
        if laws is None:
            return replace(r, size=carry.NO_LAW)
        regime = carry.regime_of(s.runs, r.claim)
        if regime is None:              # runs that recorded no size cannot be carried to
            why = "its runs record no transformer size, the law's N"
            return replace(r, size=carry.NOT_COMPARABLE,
                           note="; ".join(n for n in (r.note, why) if n))
        c = carry.carry(laws, r.claim, s.paper.ablation, regime)
        return replace(r, carried=c, size=c.word(r.test))

    return {t: [size(t, r) for r in rs] for t, rs in tested.items()}


def tally(results: list[ClaimResult], kind: str = "paper") -> str:
    """"4 reproduced, 3 not resolved (2 of 7 survive Holm, 3 BH)" over the counted claims of
    ``kind``."""
    mine = [r for r in results if r.claim.kind == kind and r.testable and r.once]
    words = [r.verdict for r in mine]
    text = ", ".join(f"{words.count(w)} {w}" for w in v.VERDICTS if w in words) or "none"
    holm, bh = sum(r.holm_survives for r in mine), sum(r.bh_survives for r in mine)
    return f"{text} ({holm} of {len(mine)} survive Holm, {bh} BH)" if mine else text
