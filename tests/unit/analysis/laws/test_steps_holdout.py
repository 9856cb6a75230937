"""analysis.laws.steps_holdout: the cells' cost from the shipped step times by hand, the prediction
interval of a few seeds' mean by hand, the nearest measured cell, and the choice of cells."""
import math

import pytest
from helpers import steps_runs as h

from nvfp4_lab.analysis.laws import steps_holdout as sh
from nvfp4_lab.analysis.laws import steps_law as sl

FAST = {"resamples": 200, "mc_seeds": range(49, 51)}


def _laws(c: float = h.C, sigma: float = 0.0, monkeypatch=None):
    if monkeypatch is not None:
        monkeypatch.setattr(h, "C", c)
    gaps = sl.paired_gaps(h.runs(h.grid_cells(), sigma=sigma),
                          h.runs(h.study_cells(), seeds=8, sigma=sigma))
    return gaps, sl.fit(gaps, "A", "relative", **FAST), sl.fit(gaps, "S", "relative", **FAST)


def test_the_cost_is_six_pairs_of_the_shipped_step_times_scaled_by_work():
    cell = sh.Candidate("w32", 46_432, 20.0, 2048)
    assert (cell.steps, cell.tokens) == (454, 454 * 2048)
    # AMD family 25 at nano, 2048 a step: BF16 225 ms, NVFP4 compiled 590 (reference 1244)
    work = (12 * 5 * 32 ** 2 + 256 * 32) / (12 * 5 * 128 ** 2 + 256 * 128)
    assert sh.core_hours(cell) == pytest.approx(6 * 454 * (0.225 + 0.590) * work / 3600)
    with pytest.raises(ValueError, match="no bf16 step time shipped for 'a machine'"):
        sh.core_hours(cell, "a machine")


def test_the_family_is_the_grids_sizes_and_d_over_n_at_each_tokens_a_step():
    cells = sh.family()
    assert len(cells) == 4 * 5 * 3
    assert {(c.size, c.params) for c in cells} == set(h.SIZES.items())
    assert {c.tpp for c in cells} == {2.0, 5.0, 10.0, 20.0, 40.0}
    assert {c.tokens_per_step for c in cells} == {512, 2048, 8192}


def test_the_interval_adds_to_the_law_the_mean_of_draws_of_the_nearest_cells_deviations():
    gaps, _, s = _laws(sigma=0.0)
    cell = sh.Candidate("w32", 46_432, 40.0, 512)
    near = sh.nearest(gaps, cell)
    assert set(near["steps"]) == {1814} and set(near["size"]) == {"w32"}   # D/N 20 at 512
    d = 0.01
    rows = near.index[:3]
    gaps = gaps.drop(near.index[3:])
    gaps.loc[rows, "rel_gap"] = gaps.loc[rows, "rel_gap"].mean() + [-d, 0.0, d]
    got = sh.predict_mean(s, gaps, cell, seeds=1)
    law = h.law(46_432, cell.tokens / 46_432, cell.steps)
    spread = math.sqrt(3 / 2) * d        # one draw of the inflated deviations, 1/3 each
    assert got.gap == pytest.approx(law, rel=1e-9)
    assert (got.lo, got.hi) == pytest.approx((law - spread, law + spread), rel=1e-9)


def test_the_chosen_cells_separate_the_laws_cheapest_first_within_the_budget():
    gaps, a, s = _laws(sigma=0.02)
    sel = sh.select(a, s, gaps, budget=0.05)
    measured = {("w32", 2048), ("w64", 2048), ("w96", 2048), ("nano", 2048),
                ("w32", 512), ("w32", 8192), ("w64", 512), ("w64", 8192)}
    assert len(sel.candidates) == 60 - 24
    assert not any((c.cell.size, c.cell.tokens_per_step) in measured and c.cell.tpp == 20
                   or c.cell.tokens_per_step == 2048 for c in sel.candidates)
    hours = [c.hours for c in sel.candidates]
    assert hours == sorted(hours)
    assert 0 < len(sel.chosen) <= sh.MOST and sum(c.hours for c in sel.chosen) <= 0.05
    for c in sel.chosen:
        assert abs(c.a.gap - c.s.gap) > max(c.a.hi - c.a.lo, c.s.hi - c.s.lo)
    skipped = [c for c in sel.candidates if c.separates and c not in sel.chosen]
    assert all(c.hours >= max(x.hours for x in sel.chosen) for c in skipped)


def test_where_the_gap_does_not_move_with_steps_no_cell_separates(monkeypatch):
    gaps, a, s = _laws(c=0.0, sigma=0.05, monkeypatch=monkeypatch)
    assert s.term("c").direction == sl.NOT_RESOLVED
    assert sh.select(a, s, gaps).chosen == ()
    with pytest.raises(ValueError, match="law A and law S of one form"):
        sh.select(s, a, gaps)
