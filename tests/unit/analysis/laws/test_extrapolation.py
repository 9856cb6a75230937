"""analysis.laws.extrapolation: the paper's runs and their gaps, and how far a law fitted on a
synthetic study (helpers/scaling_runs.py) reaches them."""
import math

import pytest
from helpers.scaling_runs import make_runs

from nvfp4_lab.analysis.laws.extrapolation import PAPER_RUNS, Reading, reach, reach_cells, trust
from nvfp4_lab.analysis.laws.scaling import fit, paired_gaps
from nvfp4_lab.analysis.sources.paper import load_paper


def test_reach_counts_decades_outside_the_fitted_range():
    res = fit(paired_gaps(make_runs(sigma=0.0), "nvfp4"), "relative", resamples=10)
    far = reach(res, 1.2e9, 1e12)             # N 1e5..2e6, D/N 2..40 fitted
    assert far.n_outside == pytest.approx(math.log10(1.2e9 / 2e6))
    assert far.tpp_outside == pytest.approx(math.log10(1e12 / 1.2e9 / 40))
    assert (far.n_span, far.tpp_span) == pytest.approx((math.log10(20), math.log10(20)))
    assert far.reading is Reading.FAR
    assert reach(res, 5e4, 5e4 * 10).n_outside == pytest.approx(math.log10(2))
    assert reach(res, 5e5, 5e6).reading is Reading.INSIDE
    assert reach(res, 1e7, 1e8).reading is Reading.SHORT    # 0.7 decades beyond N's 1.3


def test_trust_says_the_spans_once_and_what_each_reading_present_allows():
    res = fit(paired_gaps(make_runs(sigma=0.0), "nvfp4"), "relative", resamples=10)
    far, inside = reach(res, 1.2e9, 1e12), reach(res, 5e5, 5e6)
    text = trust(res, [far, inside, far])
    assert text.startswith("The fitted cells span 1.3 decades in N and 1.3 in D/N; ")
    assert text.count("far extrapolation") == 1 and "order of magnitude" in text
    assert f"interpolation is good to about the fit's residual RMS of {res.rms:.2g}" in text
    assert "short extrapolation" not in trust(res, [far])


def test_paper_runs_carry_the_papers_relative_gaps():
    runs = {r.name: r for r in PAPER_RUNS}
    assert [(r.params, r.tokens) for r in PAPER_RUNS] == [(1.2e9, 1e12), (8e9, 1e12),
                                                         (12e9, 10e12)]
    # a gap as read (positive = worse) is 100 x our rel_gap
    formats = load_paper("formats").values
    assert runs["8B"].rel_gap("nvfp4", "bf16") == pytest.approx(formats["nvfp4"] / 100)
    assert runs["8B"].rel_gap("mxfp4", "bf16") == pytest.approx(formats["mxfp4"] / 100)
    assert runs["1.2B"].rel_gap("nvfp4", "bf16") == pytest.approx(
        load_paper("cumulative").values["4_plus_sr"] / 100)
    # Fig. 6a: MXFP4 2.5% and NVFP4 1.5% above BF16, so L_mx / L_nv = 1.025 / 1.015
    assert runs["8B"].rel_gap("mxfp4", "nvfp4") == pytest.approx(1.025 / 1.015 - 1)
    assert runs["8B"].rel_gap("nvfp4", "mxfp4") == pytest.approx(1.015 / 1.025 - 1)
    # no MXFP4 at 1.2B, no BF16 at 12B, no Quartet II anywhere
    assert runs["1.2B"].rel_gap("mxfp4", "bf16") is None
    assert runs["1.2B"].rel_gap("mxfp4", "nvfp4") is None
    assert runs["12B"].rel_gap("nvfp4", "bf16") is None
    assert runs["8B"].rel_gap("quartet_ii", "bf16") is None


def test_a_law_in_steps_also_counts_the_decades_beyond_its_steps():
    runs = {r.name: r for r in PAPER_RUNS}
    assert runs["8B"].steps == pytest.approx(1e12 / 6_291_456)         # 158,946 steps
    assert runs["12B"].steps == pytest.approx(10e12 / 6_029_312)       # 1.66M
    n, tpp, steps = [1e5, 2e6], [2.0, 40.0], [100, 10_000]
    far = reach_cells(n, tpp, 1e6, 1e7, steps, 1e5)                  # inside N and D/N
    assert (far.n_outside, far.tpp_outside) == (0, 0)
    assert (far.steps_outside, far.steps_span) == pytest.approx((1.0, 2.0))
    assert far.reading is Reading.SHORT
    assert reach_cells(n, tpp, 1e6, 1e7, steps, 1e7).reading is Reading.FAR
    assert reach_cells(n, tpp, 1e6, 1e7, steps, 1e3).reading is Reading.INSIDE
    assert reach_cells(n, tpp, 1e6, 1e7).reading is Reading.INSIDE      # no steps: law A
