"""analysis.laws.holdout on synthetic studies drawn from a known law (helpers/scaling_runs.py): the
corner left out of the fit, its prediction interval by hand, and its coverage."""
import dataclasses
import math

import numpy as np
import pytest
from helpers.scaling_runs import SIZES, A, B, K, hand_cell_means, lstsq_law, make_runs

from nvfp4_lab.analysis.laws.holdout import check, in_cell, predict
from nvfp4_lab.analysis.laws.scaling import fit, paired_gaps

CORNER = ("s2m", SIZES["s2m"], 40.0)      # the synthetic grid's largest size at its longest D/N


def _scaled_corner(runs, factor: float):
    """``runs`` with the corner's NVFP4 gaps times ``factor``."""
    runs = runs.copy()
    corner = (runs["size"] == "s2m") & (runs["tokens"] == int(40 * 2e6))
    bf16 = runs[corner & (runs["recipe"] == "bf16")].set_index("seed")["loss"]
    fp4 = corner & (runs["recipe"] == "nvfp4")
    runs.loc[fp4, "loss"] = [bf16[s] + factor * (loss - bf16[s])
                             for s, loss in zip(runs.loc[fp4, "seed"], runs.loc[fp4, "loss"])]
    return runs


def test_the_interval_adds_one_inflated_residual_to_each_refit():
    # A noiseless study: every refit is the true law. With residuals (-r, -r, r, r) as if from
    # 4 cells, each draw adds sqrt(4 / 1) r = 2r of either sign, so the 2.5th and 97.5th
    # percentiles are the law times exp(-2r) and exp(+2r).
    exact = fit(paired_gaps(make_runs(sigma=0.0), "nvfp4"), "relative", resamples=400)
    r = 0.1
    four = dataclasses.replace(exact, residuals=(-r, -r, r, r), n_cells=4)
    got = predict(four, 5e5, 30.0)
    law = K * 30.0 ** A * 5e5 ** B
    assert got.gap == pytest.approx(law, rel=1e-9)
    assert (got.lo, got.hi) == pytest.approx((law * math.exp(-2 * r), law * math.exp(2 * r)),
                                             rel=1e-9)
    assert got.tokens == pytest.approx(30.0 * 5e5)
    with pytest.raises(ValueError, match="3 cells leave none; it needs four") as err:
        predict(dataclasses.replace(four, n_cells=3, residuals=(0.0,) * 3), 5e5, 30.0)
    assert "\n" not in str(err.value)


def test_the_corner_is_left_out_of_the_fit_and_read_against_it():
    runs = make_runs(sigma=0.1, data_seed=5)
    gaps = paired_gaps(runs, "nvfp4")
    got = check(gaps, *CORNER, "relative")
    means = hand_cell_means(runs, "relative")
    rest = means[~((means.index.get_level_values("size") == "s2m")
                   & np.isclose(means.index.get_level_values("tpp"), 40.0))]
    log_k, a, b = lstsq_law(rest)
    assert got.fitted == 19 and len(rest) == 19
    law = math.exp(log_k + a * math.log(40) + b * math.log(2e6))
    assert got.predicted.gap == pytest.approx(law, rel=1e-9)
    corner = gaps[(gaps["size"] == "s2m") & (gaps["tokens"] == int(40 * 2e6))]["rel_gap"]
    assert got.observed.n == 3 and got.observed.mean == pytest.approx(corner.mean(), rel=1e-12)
    assert got.predicted.lo < got.predicted.gap < got.predicted.hi


@pytest.mark.parametrize(("factor", "reading"), [(1.0, "inside"), (4.0, "above"),
                                                 (0.25, "below")])
def test_the_reading_says_where_the_corner_fell(factor, reading):
    # 2% seed noise: the corner as drawn lies well inside; 4x or 1/4 of it, far outside
    gaps = paired_gaps(_scaled_corner(make_runs(sigma=0.02, data_seed=1), factor), "nvfp4")
    assert check(gaps, *CORNER, "relative").reading == reading


def test_the_prediction_does_not_use_the_corner():
    gaps = paired_gaps(make_runs(sigma=0.1, data_seed=2), "nvfp4")
    before = check(gaps[~in_cell(gaps, "s2m", 40.0)], *CORNER, "absolute")
    after = check(gaps, *CORNER, "absolute")
    assert before.predicted == after.predicted and before.fitted == after.fitted == 19
    assert (before.observed.n, before.reading) == (0, "not finished")
    assert after.observed.n == 3 and after.reading != "not finished"
    far = check(paired_gaps(_scaled_corner(make_runs(sigma=0.1, data_seed=2), 9.0), "nvfp4"),
                *CORNER, "absolute")
    assert far.predicted == after.predicted


def test_in_cell_takes_a_run_a_few_steps_off_its_nominal_level():
    gaps = paired_gaps(make_runs(sigma=0.0, tpps=(20, 40.3, 40)), "nvfp4")
    held = in_cell(gaps, "s2m", 40.0)
    assert set(gaps.loc[held, "size"]) == {"s2m"} and held.sum() == 6
    assert not in_cell(gaps, "s2m", 50.0).any()


def test_the_interval_covers_a_held_out_cell_close_to_its_level():
    # 150 studies from the law, 10% seed noise, 3 seeds, 200 resamples a fit: the corner's
    # mean falls inside its 95% prediction interval in 93% of them (94% of 300 studies at 1000
    # resamples; binomial sd ~2%). The refits alone, without a residual, cover it in 60%: they
    # bound the law, not a new cell's mean.
    inside, refits_only = [], []
    for s in range(150):
        gaps = paired_gaps(make_runs(sigma=0.1, data_seed=100 + s), "nvfp4")
        held = in_cell(gaps, "s2m", 40.0)
        law = fit(gaps[~held], "relative", resamples=200)
        p = predict(law, 2e6, 40.0)
        mean = gaps.loc[held, "rel_gap"].mean()
        inside.append(p.lo <= mean <= p.hi)
        at_corner = law.draws @ [1.0, math.log(40), math.log(2e6)]
        lo, hi = np.exp(np.percentile(at_corner, [2.5, 97.5]))
        refits_only.append(lo <= mean <= hi)
    assert np.mean(inside) >= 0.9, np.mean(inside)
    assert np.mean(refits_only) < np.mean(inside)
