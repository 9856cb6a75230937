"""analysis.findings.context: a one-seed run read against the published intervals (the quickstart's
report), the share of seeds one run orders as the paper by hand (erf), and the shipped copy of
the published claims equal to the index's results/claims.csv."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from nvfp4_lab.analysis.findings.context import CLAIM_COLUMNS, context_md, one_run_share, shipped
from nvfp4_lab.analysis.reports.report import write_report
from nvfp4_lab.analysis.sources.paper import load_paper

RESULTS = Path(__file__).parents[4] / "results"


def phi(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def published(rows, superseded_by=None, model="nano", sweep="formats",
              metric="final_val_loss") -> pd.DataFrame:
    """(claim, n, mean, sd) rows as the index writes them."""
    return pd.DataFrame([{"table": "v1", "sweep": sweep, "claim": c, "metric": metric,
                          "kind": "paper", "n": n,
                          "mean": m, "sd": sd, "lo": m - 1, "hi": m + 1, "verdict": "x",
                          "machine": "x86_64 AVX2", "scale": model, "model": model,
                          "superseded_by": superseded_by} for c, n, m, sd in rows],
                        columns=CLAIM_COLUMNS)


def test_one_run_share_by_hand():
    """A claim gap (b - a) / a is positive where b has the higher loss, as "a < b" says."""
    assert one_run_share(1.0, 0.7) == pytest.approx(phi(1.0 / 0.7), abs=1e-12)
    assert one_run_share(-0.3, 0.6) == pytest.approx(phi(-0.5), abs=1e-12)
    assert one_run_share(0.1, 0.0) == 1.0 and one_run_share(-0.1, 0.0) == 0.0


def test_context_says_which_orderings_one_run_can_show():
    paper = load_paper("quickstart")
    gone = published([("nvfp4 < mxfp4", 12, 3.0, 0.5)], superseded_by="big (20 seeds)")
    other = published([("bf16 < nvfp4", 9, 4.0, 0.5)], metric="tail_train_loss")
    table = pd.concat([published([("bf16 < nvfp4", 8, 1.0, 0.3),
                                  ("nvfp4 < mxfp4", 3, 0.12, 0.6)]), gone, other])
    text = context_md(paper, {"bf16 < nvfp4": 0.8}, table)
    assert "+3.00" not in text and "12 seeds" not in text      # superseded: neither listed nor used
    assert "+4.00" not in text and "9 seeds" not in text       # another metric than the verdicts'
    assert "paired gap (b - a) / a x 100 (positive = the second-named arm worse)" in text
    bf16, fp4 = (next(li for li in text.splitlines() if li.startswith(f"- `{c}`"))
                 for c in ("bf16 < nvfp4", "nvfp4 < mxfp4"))
    assert "this run +0.80%" in bf16 and f"about {phi(1 / 0.3):.0%}" in bf16
    assert "one run shows this ordering" in bf16
    assert "not measured" in fp4 and f"about {phi(0.12 / 0.6):.0%}" in fp4
    assert "one run cannot rank the pair" in fp4 and "over 3 seeds (x86_64 AVX2" in fp4
    assert context_md(paper, {}, published([])) == ""


def test_one_run_is_read_against_its_own_models_spread_then_the_most_seeds():
    paper = load_paper("quickstart")
    table = pd.concat([published([("bf16 < nvfp4", 8, 0.5, 0.3)], model="hybrid_nano",
                                 sweep="hybrid"),
                       published([("bf16 < nvfp4", 3, 1.0, 1.0)], model="nano", sweep="small"),
                       published([("bf16 < nvfp4", 8, 1.0, 0.6)], model="nano", sweep="big")])
    share = {m: context_md(paper, {}, table, m).split("orders the pair as the paper on about ")[1]
             for m in ("nano", "hybrid_nano", "w32", None)}
    assert share["nano"].startswith(f"{phi(1.0 / 0.6):.0%}")
    assert "From the spread of v1 big (8 seeds, 0.60 points)" in context_md(paper, {}, table,
                                                                          "nano")
    for other in ("hybrid_nano", "w32", None):     # its own, else the first with the most seeds
        assert share[other].startswith(f"{phi(0.5 / 0.3):.0%}")


def test_quickstart_report_places_its_gaps_beside_the_published_ones(runs_factory, tmp_path):
    """A one-seed quickstart sweep: its report's section gives this run's paired gaps (by
    hand from its losses) and the shipped published rows of the same claims."""
    losses = {"bf16": 3.0, "nvfp4": 3.03, "mxfp4": 3.036}
    for i, (quant, loss) in enumerate(losses.items()):
        runs_factory(f"{i}_quant={quant}/seed=0", quant=quant, seed=0, name="quickstart",
                     val_loss=[loss + 0.5, loss + 0.2, loss + 0.1, loss])
    text = write_report([tmp_path / "sweep"]).read_text()
    section = text.split("## This run beside the lab's published intervals")[1]
    assert f"this run {(3.03 - 3.0) / 3.0 * 100:+.2f}%" in section      # NVFP4's gap to BF16
    assert f"this run {(3.036 - 3.03) / 3.03 * 100:+.2f}%" in section
    rows = shipped()
    for r in rows[rows["claim"] == "bf16 < nvfp4"].itertuples():
        name = f"{r.table} {r.sweep}"
        shown = f"; {name} {r.mean:+.2f} [{r.lo:+.2f}, {r.hi:+.2f}]" in section.replace(
            "Published: ", "; ")
        verdicts = r.metric == "final_val_loss"
        assert shown == (pd.isna(r.superseded_by) and verdicts), (name, r.superseded_by)


def test_the_package_ships_the_index_claims():
    """The shipped copy is the index's own table (regenerated with the index)."""
    assert shipped().equals(pd.read_csv(RESULTS / "claims.csv"))
