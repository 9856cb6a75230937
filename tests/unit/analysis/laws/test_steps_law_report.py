"""analysis.laws.steps_law_report: the section waits for the study's whole seeds, then shows the
fits' numbers, the law read, the paper's runs and the held-out cells it computed."""
import pandas as pd
from helpers import steps_runs as h

from nvfp4_lab.analysis.laws import steps_holdout as sh
from nvfp4_lab.analysis.laws import steps_law as sl
from nvfp4_lab.analysis.laws.steps_law_report import section

FAST = {"resamples": 200, "mc_seeds": range(49, 51)}


def test_the_section_waits_for_the_studys_planned_whole_seeds():
    grid, study = h.runs(h.grid_cells()), h.runs(h.study_cells(), seeds=7)
    parts = section(grid, study, **FAST)
    assert parts[1] == ("The refit waits for the steps-or-size study's 8 whole seeds (7 in): "
                        "it is read with the study.")


def test_the_section_shows_the_law_read_the_papers_runs_and_the_held_out_cells():
    grid, study = h.runs(h.grid_cells(), sigma=0.05), h.runs(h.study_cells(), seeds=8,
                                                               sigma=0.05)
    parts = section(grid, study, **FAST)
    gaps = sl.paired_gaps(grid, study)
    s = sl.fit(gaps, "S", "relative", **FAST)
    assert f"**Law read: S.** {sl.read_law(s).reason}" in [p for p in parts if isinstance(p, str)]
    tables = [p for p in parts if isinstance(p, pd.DataFrame)]
    terms, batch, paper, held = tables
    c = s.term("c")
    row = terms[(terms["law"] == "S") & (terms["gap"] == "relative")].iloc[0]
    assert row["c"].startswith(f"{c.value:+.3f} [{c.lo:+.3f}, {c.hi:+.3f}]")
    assert batch.iloc[0]["-c (B)"].startswith(f"{-c.value:+.3f}")
    at_8b = sl.at_paper(s)[1].predicted
    assert paper.loc[1, "law S, relative"].startswith(f"{at_8b.gap * 100:+.3g}%")
    assert paper.loc[1, "paper"] == "+1.5%"
    chosen = sh.select(sl.fit(gaps, "A", "relative", **FAST), s, gaps).chosen
    assert list(zip(held["size"], held["tokens a step"])) == [
        (x.cell.size, f"{x.cell.tokens_per_step:,}") for x in chosen]
