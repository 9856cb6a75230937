"""A user's run read against the lab's published intervals: what one seed can and cannot show.

The results index (``analysis.index``) writes every tested claim to ``results/claims.csv``
(``CLAIM_COLUMNS``); the package ships a copy, ``nvfp4_lab/paper/lab_claims.csv``, refreshed
whenever the index of the checkout's own ``results/`` is written, so that a report made from
a wheel install still has them. A report whose paper entry makes a claim the lab has
published (the quickstart's ``bf16 < nvfp4``, ``nvfp4 < mxfp4``) lists, beside the run's own
paired gap, each published interval with its seeds and machine, and says how often a single
seed orders the pair as the paper does: if one seed's gap g is normal with the published mean
m and spread s, that share is

    P(sign g = sign of the paper's claim) = Phi(m / s)           ("a < b": m > 0 agrees),

which is high only where |m| is several s. Below 90% one run cannot rank the pair.
``plan_lines`` gives ``--dry-run`` of an ablation the fresh paired seeds each published claim
needs (``answers.fresh_seeds``: at the paper's gap carried, else at the margin; never at the
gap just observed) and what they would cost on this machine.
"""
from __future__ import annotations

import math
import shutil
from pathlib import Path

import pandas as pd
from scipy import stats

from ...configs import paper_dir
from ..inference.stats import CLAIM_CONVENTION, CLAIM_GAP, FLOAT_FORMAT
from ..inference.verdicts import seeds_text
from ..sources.paper import PaperResult
from .claims import PRIMARY

CLAIM_COLUMNS = ["table", "sweep", "claim", "metric", "kind", "n", "mean", "sd", "lo", "hi",
                 "verdict", "p_holm", "p_bh", "current", "seeds_fresh", "seeds_target",
                 "machine", "scale", "model", "superseded_by", "counted_in", "same_runs_as",
                 "verdict_v2_rule", "verdict_amendment8", "size", "carried_gap", "carried_lo",
                 "carried_hi", "carried_regime", "gap_convention"]
SHIPPED = "lab_claims.csv"
LAW_COLUMNS = ("carried_gap", "carried_lo", "carried_hi")     # from the laws' fits
ONE_RUN_SHOWS = 0.9      # the share of seeds above which one run is said to show an ordering


def shipped() -> pd.DataFrame:
    """The published claims shipped with the package (empty where none were shipped)."""
    path = paper_dir() / SHIPPED
    return pd.read_csv(path) if path.is_file() else pd.DataFrame(columns=CLAIM_COLUMNS)


def write_claims(results: Path, table: pd.DataFrame) -> None:
    """``claims.csv`` in ``results``: the columns carried by the laws at ``FLOAT_FORMAT`` (their
    fits' last bits differ between CPUs), the rest whole; copied into the package when
    ``results`` is this checkout's own results/ (a user's index elsewhere leaves it alone)."""
    laws = {c: table[c].map(lambda x: FLOAT_FORMAT % x, na_action="ignore")
            for c in LAW_COLUMNS}
    table.assign(**laws).to_csv(results / "claims.csv", index=False)
    checkout = paper_dir().parents[2] / "results"
    if checkout.is_dir() and Path(results).resolve() == checkout.resolve():
        shutil.copyfile(results / "claims.csv", paper_dir() / SHIPPED)


def _rows(published: pd.DataFrame, claim) -> pd.DataFrame:
    """The published intervals of ``claim``: those with a spread, not superseded by a larger
    sweep of the same claims (``answers.superseding``), on the verdicts' metric."""
    return published[(published["claim"] == str(claim)) & published["sd"].notna()
                     & published["superseded_by"].isna() & (published["metric"] == PRIMARY)]


def source(design: str, sweep: str) -> str:
    """Where a claim row comes from, as the index names it: its design, then its sweep."""
    return f"{design} {sweep}"


def _spread_row(rows: pd.DataFrame, model: str | None) -> pd.Series:
    """The published row whose spread a single run is read against: one of ``model`` (the
    run's) if any, with the most seeds; the earliest listed among equals."""
    keys = list(zip(rows["model"] != model, -rows["n"]))
    return rows.iloc[keys.index(min(keys))]


def one_run_share(mean: float, sd: float) -> float:
    """The share of seeds whose single gap has the sign the claim "a < b" predicts."""
    return float(stats.norm.cdf(mean / sd)) if sd > 0 else float(mean > 0)


def context_md(paper: PaperResult, ours: dict[str, float], published: pd.DataFrame,
               model: str | None = None) -> str:
    """The report section: for each direction claim of ``paper`` with published rows, our gap
    (``ours``: claim -> this run's mean paired gap, computed by the caller), each published
    interval, and what one run can show, read from the spread of a row of the run's ``model``
    where one exists; "" when the lab has published none of its claims."""
    lines = []
    for claim in (c for c in paper.claims if not c.same):
        rows = _rows(published, claim)
        if rows.empty:
            continue
        mine = ours.get(str(claim), math.nan)
        own = f"{mine:+.2f}%" if math.isfinite(mine) else "not measured"
        best = _spread_row(rows, model)
        share = one_run_share(best["mean"], best["sd"])
        can = ("so one run shows this ordering" if share >= ONE_RUN_SHOWS else
               "so one run cannot rank the pair")
        lines.append(f"- `{claim}`: this run {own}. Published: " + "; ".join(
            f"{source(r.table, r.sweep)} {r.mean:+.2f} [{r.lo:+.2f}, {r.hi:+.2f}] over "
            f"{int(r.n)} seeds ({r.machine}; {r.scale})" for r in rows.itertuples())
            + f". From the spread of {source(best['table'], best['sweep'])} "
            f"({int(best['n'])} seeds, {best['sd']:.2f} points), a "
            f"single seed orders the pair as the paper on about {share:.0%} of seeds, {can}.")
    if not lines:
        return ""
    return ("## This run beside the lab's published intervals\n\n"
            f"One seed is one sample of the paired gap {CLAIM_GAP} ({CLAIM_CONVENTION}); "
            "the lab's intervals "
            "(results/README.md) say how far a seed's gap spreads. They were measured at the "
            "lab scale on the machines named, and the float sums (so the exact losses) differ "
            "from one CPU type to another.\n\n" + "\n".join(lines))


def plan_lines(paper: PaperResult, published: pd.DataFrame,
               seconds_per_seed: float | None) -> list[str]:
    """One line per claim of ``paper`` the lab has published: the fresh seeds for 80% power
    at the index's target (amendment 10), and their CPU time here (``seconds_per_seed``: what
    one seed of the command's arms costs; None when not measured)."""
    lines = []
    for claim in paper.claims:
        rows = _rows(published, claim)
        for r in rows.itertuples():
            need = None if pd.isna(r.seeds_fresh) else int(r.seeds_fresh)
            cost = ("" if seconds_per_seed is None or need is None or need > 1000 else
                    f"; ~{need * seconds_per_seed / 3600:.1f} h here")
            size = f"; on the paper's size: {r.size}" if isinstance(r.size, str) else ""
            lines.append(f"  `{claim}` ({source(r.table, r.sweep)}, {int(r.n)} seeds, "
                         f"{r.verdict}{size}): {seeds_text(need) or '-'} fresh, "
                         f"{r.seeds_target}{cost}")
    return (["fresh seeds for 80% power, from the published results (results/README.md; "
             "at the paper's gap carried, else at the margin):", *lines]
            if lines else [])
