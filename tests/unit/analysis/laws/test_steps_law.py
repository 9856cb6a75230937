"""analysis.laws.steps_law on synthetic grids and studies drawn from a known law in steps
(helpers/steps_runs.py): the exponents come back, the point fit is numpy's least squares done
here by hand, c is refused where every cell took one tokens a step, repeated runs count once,
the direction rule, law S in tokens a step, and the paper's runs by hand."""
import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from helpers import steps_runs as h

from nvfp4_lab.analysis.laws import steps_law as sl
from nvfp4_lab.analysis.laws.extrapolation import PAPER_RUNS
from nvfp4_lab.analysis.laws.scaling import FORMS, bootstrap

FAST = {"resamples": 200, "mc_seeds": range(49, 52)}


def _gaps(sigma: float = 0.0, study_seeds: int = 8) -> pd.DataFrame:
    return sl.paired_gaps(h.runs(h.grid_cells(), sigma=sigma),
                          h.runs(h.study_cells(), seeds=study_seeds, sigma=sigma))


def _hand_cells(gaps: pd.DataFrame, form: str = "relative") -> pd.DataFrame:
    """Cell means straight from the pairs, with the regressors' raw values."""
    return gaps.groupby(["size", "params", "tokens", "tokens_per_step", "steps"],
                        as_index=False)[FORMS[form]].mean()


def test_without_noise_the_fit_gives_the_chosen_exponents_back():
    s = sl.fit(_gaps(), "S", "relative", **FAST)
    values = [t.value for t in s.terms]
    assert values == pytest.approx([math.log(h.K), h.A, h.B, h.C], abs=1e-9)
    assert s.rms < 1e-9 and len(s.cells) == 24 and s.excluded.empty


def test_with_small_noise_the_exponents_come_back_inside_their_intervals():
    s = sl.fit(_gaps(sigma=0.03), "S", "relative", **FAST)
    for name, true in (("a", h.A), ("b", h.B), ("c", h.C)):
        t = s.term(name)
        assert t.lo < true < t.hi and abs(t.value - true) < 0.03


@pytest.mark.parametrize("law", ["S", "A"])
def test_the_point_fit_is_least_squares_on_the_logs_of_the_cell_means(law):
    gaps = _gaps(sigma=0.2)
    cells = _hand_cells(gaps)
    columns = [np.ones(len(cells)), np.log(cells["tokens"] / cells["params"]),
               np.log(cells["params"])] + ([np.log(cells["steps"])] if law == "S" else [])
    x = np.column_stack(columns)
    coef, *_ = np.linalg.lstsq(x, np.log(cells["rel_gap"]), rcond=None)
    got = sl.fit(gaps, law, "relative", **FAST)
    assert [t.value for t in got.terms] == pytest.approx(list(coef), abs=1e-10)
    residuals = np.log(cells["rel_gap"]) - x @ coef
    assert got.rms == pytest.approx(math.sqrt(np.mean(residuals ** 2)), rel=1e-9)


def test_law_s_in_tokens_a_step_is_the_least_squares_on_log_b_by_hand():
    gaps = _gaps(sigma=0.2)
    cells = _hand_cells(gaps)
    x = np.column_stack([np.ones(len(cells)), np.log(cells["tokens"] / cells["params"]),
                         np.log(cells["params"]), np.log(cells["tokens_per_step"])])
    coef, *_ = np.linalg.lstsq(x, np.log(cells["rel_gap"]), rcond=None)
    s = sl.fit(gaps, "S", "relative", **FAST)
    assert [t.value for t in s.batch_terms] == pytest.approx(list(coef), abs=1e-9)
    a, b, c = (s.term(n).value for n in "abc")
    assert [t.value for t in s.batch_terms[1:]] == pytest.approx([a + c, b + c, -c], abs=1e-12)
    minus_c = s.batch_terms[3]
    assert (minus_c.lo, minus_c.hi) == pytest.approx((-s.term("c").hi, -s.term("c").lo))


def test_one_tokens_a_step_leaves_c_unidentifiable_in_one_line():
    grid = h.runs(h.grid_cells())
    gaps = sl.paired_gaps(grid, grid.iloc[:0])
    with pytest.raises(ValueError, match="^c is not identifiable: every cell with a positive "
                                         "mean gap took 2048 tokens a step") as err:
        sl.fit(gaps, "S", "relative", **FAST)
    assert "\n" not in str(err.value)
    assert sl.fit(gaps, "A", "relative", **FAST).term("b").value == pytest.approx(h.B + h.C)


def test_pairs_repeated_bit_for_bit_count_once_and_differing_repeats_are_refused():
    grid, study = h.runs(h.grid_cells()), h.runs(h.study_cells(), seeds=8)
    gaps = sl.paired_gaps(grid, study)
    shared = ((gaps["tpp"].round() == 20) & (gaps["tokens_per_step"] == 2048)
              & gaps["size"].isin(["w32", "w64"]))
    assert len(gaps) == 20 * 3 + 6 * 8 - 2 * 3
    assert gaps[shared].groupby("size")["seed"].apply(sorted).tolist() == [list(range(8))] * 2
    changed = study.copy()
    one = ((changed["model"] == "w64") & (changed["steps"] == 1807) & (changed["seed"] == 1)
           & (changed["recipe"] == "nvfp4"))
    changed.loc[one, "final_val_loss"] += 1e-7
    with pytest.raises(ValueError, match=r"^w64 at .* 2048 a step, seed 1 has pairs whose "
                                         r"losses differ"):
        sl.paired_gaps(grid, changed)


def test_only_the_studys_whole_seeds_enter():
    grid, study = h.runs(h.grid_cells()), h.runs(h.study_cells(), seeds=8)
    study = study[~((study["seed"] == 7) & (study["steps"] == 452))]     # seed 7 not whole
    gaps = sl.paired_gaps(grid, study)
    assert 7 not in set(gaps.loc[gaps["tokens_per_step"] != 2048, "seed"])


@pytest.mark.parametrize(("lo", "hi", "mc_lo", "mc_hi", "expected"), [
    (0.05, 0.30, 0.02, 0.0, "positive"),       # clears 0 by 0.05 > 2 x 0.02
    (0.05, 0.30, 0.03, 0.0, "not resolved"),   # 0.05 < 2 x 0.03: excludes 0, not resolved
    (-0.30, -0.05, 0.0, 0.02, "negative"),
    (-0.30, -0.05, 0.5, 0.03, "not resolved"),
    (-0.10, 0.20, 0.0, 0.0, "not resolved"),
])
def test_a_sign_is_named_only_where_its_bound_clears_0_by_twice_its_mc_error(
        lo, hi, mc_lo, mc_hi, expected):
    assert sl.direction(lo, hi, mc_lo, mc_hi) == expected
    assert sl.Term("c", 0.1, lo, hi, mc_lo, mc_hi).direction == expected


def test_the_mc_error_is_the_sd_of_each_bound_over_the_generator_seeds():
    gaps = _gaps(sigma=0.3)
    s = sl.fit(gaps, "S", "relative", resamples=200, mc_seeds=range(49, 53))
    bounds = np.array([np.percentile(bootstrap(gaps, "rel_gap", 200, seed, sl.LAWS["S"])[:, 3],
                                     [2.5, 97.5]) for seed in range(49, 53)])
    c = s.term("c")
    assert (c.lo, c.hi) == pytest.approx(tuple(bounds[0]), abs=1e-12)
    assert (c.mc_lo, c.mc_hi) == pytest.approx(tuple(bounds.std(axis=0, ddof=1)), rel=1e-9)


def test_the_law_read_is_s_where_c_is_resolved_and_a_where_it_is_not():
    s = sl.fit(_gaps(sigma=0.05), "S", "relative", **FAST)
    assert sl.read_law(s).law == "S" and "law S is read" in sl.read_law(s).reason
    c = dataclasses.replace(s.term("c"), lo=-0.5, hi=0.1)
    loose = dataclasses.replace(s, terms=(*s.terms[:3], c))
    reading = sl.read_law(loose)
    assert reading.law == "A"
    assert "steps were tested and did not separate from size at this power" in reading.reason
    with pytest.raises(ValueError, match="relative gap"):
        sl.read_law(sl.fit(_gaps(sigma=0.05), "S", "absolute", **FAST))


def test_the_laws_at_the_papers_runs_at_their_own_tokens_a_step_by_hand():
    s, a = (sl.fit(_gaps(sigma=0.1), law, "relative", **FAST) for law in ("S", "A"))
    log_k, ea, eb, ec = (t.value for t in s.terms)
    at = {p.run.name: p for p in sl.at_paper(s)}
    steps_8b = 1e12 / 6_291_456
    assert steps_8b == pytest.approx(158_946, abs=0.5)
    assert at["8B"].predicted.gap == pytest.approx(
        math.exp(log_k) * (1e12 / 8e9) ** ea * 8e9 ** eb * steps_8b ** ec, rel=1e-9)
    assert at["12B"].predicted.gap == pytest.approx(
        math.exp(log_k) * (10e12 / 12e9) ** ea * 12e9 ** eb * (10e12 / 6_029_312) ** ec,
        rel=1e-9)
    assert all(p.predicted.lo < p.predicted.gap < p.predicted.hi for p in at.values())
    # the fitted steps reach 14,428 (nano at D/N 40): 158,946 steps lie 1.04 decades beyond
    assert at["8B"].reach.steps_outside == pytest.approx(math.log10(steps_8b / 14_428), abs=1e-3)
    la, aa, ba = (t.value for t in a.terms)
    assert sl.at_paper(a)[0].predicted.gap == pytest.approx(
        math.exp(la) * (1e12 / 1.2e9) ** aa * 1.2e9 ** ba, rel=1e-9)
    assert sl.at_paper(a)[0].reach.steps_outside == 0
    assert [r.tokens_per_step for r in PAPER_RUNS] == [768 * 8192, 768 * 8192, 736 * 8192]
