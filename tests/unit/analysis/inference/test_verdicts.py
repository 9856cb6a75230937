"""analysis.inference.verdicts against hand calculations, closed forms and scipy's own tests
(ttest_1samp, a printed power table): each claim's own spread, TOST, the verdict words, Holm and
BH, and the seeds a claim needs."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from nvfp4_lab.analysis.inference import verdicts as v


def t2_cdf(t: float) -> float:
    """Student's t CDF at 2 degrees of freedom, closed form."""
    return 0.5 + t / (2 * math.sqrt(2 + t * t))


def test_own_spread_matches_scipys_one_sample_t_test():
    gaps = np.array([-0.43, -0.79, -1.80])
    test = v.gap_test(gaps)
    ref = stats.ttest_1samp(gaps, 0.0)
    ci = ref.confidence_interval(0.95)
    assert (test.n, test.df) == (3, 2)
    assert test.lo == pytest.approx(ci.low, abs=1e-12)
    assert test.hi == pytest.approx(ci.high, abs=1e-12)
    assert test.p_against(0.0) == pytest.approx(ref.pvalue, abs=1e-12)


def test_every_claim_keeps_its_own_spread_and_n_minus_1_df():
    """At 3 seeds the interval's half-width is t_{0.975, 2} = 4.30 standard errors, whatever
    other claims there are: no pooled t(8) = 2.31."""
    gaps = np.array([1.0, 2.0, 4.0])
    test = v.gap_test(gaps)
    se = gaps.std(ddof=1) / math.sqrt(3)
    assert test.df == 2 and test.half == pytest.approx(4.3026527297 * se, rel=1e-10)


def test_tost_at_two_degrees_of_freedom_by_closed_form():
    gaps = np.array([0.1, -0.2, 0.25])
    test = v.gap_test(gaps)
    m, se = gaps.mean(), gaps.std(ddof=1) / math.sqrt(3)
    want = max(1 - t2_cdf((m + 0.5) / se), t2_cdf((m - 0.5) / se))
    assert test.p_tost(0.5) == pytest.approx(want, abs=1e-12)
    assert v.verdict(True, test) == ("equivalent" if want < 0.05 else "not resolved")


@pytest.mark.parametrize("same, gaps, word", [
    # a claim gap is (b - a) / a: positive = b, the second-named arm, worse, as "a < b" says
    (False, [1.0, 1.2, 0.9], "reproduced"),
    (False, [-1.0, -1.2, -0.9], "contradicted"),
    # below a paper gap of 1.5 once read "rules out the paper's size": size is now apart
    (False, [0.1, -0.2, 0.0], "not resolved"),
    (False, [3.0, -2.0, -0.5], "not resolved"),
    (True, [0.01, -0.02, 0.0], "equivalent"),
    (True, [0.4, 0.5, 0.45], "contradicted"),
    (True, [-2.0, 2.5, 0.3], "not resolved"),
    # the 90% interval inside +-0.5 though the 95% one excludes 0: equivalent
    (True, [-0.06, -0.08, -0.07, -0.05, -0.04], "equivalent"),
])
def test_verdict_words(same, gaps, word):
    assert v.verdict(same, v.gap_test(np.array(gaps))) == word


def test_degenerate_means_every_gap_exactly_zero():
    assert v.degenerate(np.zeros(3)) and not v.degenerate(np.array([0.0, 0.0, 1e-12]))
    assert not v.degenerate(np.array([]))


def test_holm_and_bh_by_hand():
    p = np.array([0.01, 0.04, 0.03, 0.005])
    # sorted 0.005 0.01 0.03 0.04 times 4 3 2 1 = 0.02 0.03 0.06 0.04, running max
    assert v.holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-15)
    # sorted times 4/1 4/2 4/3 4/4 = 0.02 0.02 0.04 0.04, running min from the top
    assert v.bh(p) == pytest.approx([0.02, 0.04, 0.04, 0.02], abs=1e-15)
    assert v.holm(np.array([0.6, 0.7])) == pytest.approx([1.0, 1.0])


@pytest.mark.parametrize("effect, n", [(1.0, 10), (0.8, 15), (0.5, 34)])
def test_seeds_needed_matches_the_printed_power_table(effect, n):
    """One-sample / paired t-test, two-sided 5%, 80% power (Cohen's table, G*Power): effect
    sizes 1.0, 0.8 and 0.5 need 10, 15 and 34 pairs."""
    assert v.seeds_needed(-effect * 0.3, 0.3) == n
    assert v.power(n, effect, 1.0) >= 0.8 > v.power(n - 1, effect, 1.0)


def test_power_where_scipy_loses_the_far_tail():
    """Gap -1.33, spread 0.13, 3 seeds: noncentrality 17.8, where scipy's noncentral t CDF at
    -t_{0.975,2} is NaN; the power is the upper tail alone, ~1 - 1.8e-7."""
    assert v.power(3, -1.3318339211037875, 0.12956729305470066) == pytest.approx(
        stats.nct.sf(stats.t.ppf(0.975, 2), 2, 17.803906867310673), abs=1e-9)
    assert v.seeds_needed(-1.3318339211037875, 0.12956729305470066) == 3


def test_seeds_needed_edges():
    assert v.seeds_needed(None, 1.0) is None and v.seeds_needed(0.0, 1.0) is None
    assert v.seeds_needed(-1.0, 0.0) is None
    assert v.seeds_needed(-1e-3, 1.0) == v.MAX_SEEDS + 1
    assert v.seeds_text(v.MAX_SEEDS + 1) == f"> {v.MAX_SEEDS}" and v.seeds_text(7) == "7"


def test_tost_power_against_a_simulation():
    """The seeds TOST needs when the true gap is 0, checked by simulating that many seeds (the
    TOST decision computed here from the sample means and spreads, vectorised)."""
    sd, rng = 0.4, np.random.default_rng(0)
    n = v.seeds_needed(0.0, sd, equivalence=True)

    def passes(k: int) -> float:
        g = rng.normal(0.0, sd, size=(40_000, k))
        m, se = g.mean(axis=1), g.std(axis=1, ddof=1) / math.sqrt(k)
        crit = stats.t.ppf(0.95, k - 1)
        return float(np.mean(((m + 0.5) / se > crit) & ((m - 0.5) / se < -crit)))

    assert passes(n) >= 0.8 - 0.01 and passes(n - 1) < 0.8 + 0.01


def test_an_equivalent_null_whose_95_interval_excludes_0_says_both():
    """Five seeds of gap -0.06 (precision_switch_nano's switch_bwd_0.82 ~ nvfp4 on the
    averaged train loss): 90% interval [-0.08, -0.04] inside +-0.5, so TOST passes; the 95%
    interval [-0.08, -0.04] excludes 0. Equivalent, and the note says the other."""
    gaps = np.array([-0.06, -0.08, -0.07, -0.05, -0.04])
    m, se = gaps.mean(), gaps.std(ddof=1) / math.sqrt(5)
    ninety = (m - stats.t.ppf(0.95, 4) * se, m + stats.t.ppf(0.95, 4) * se)
    ci = stats.ttest_1samp(gaps, 0.0).confidence_interval(0.95)
    assert -0.5 < ninety[0] < ninety[1] < 0.5 and ci.high < 0        # the case's shape
    test = v.gap_test(gaps)
    word = v.verdict(True, test)
    assert word == "equivalent"
    assert v.note(True, word, test) == "equivalent; its 95% interval also excludes 0"
    assert v.note(True, "equivalent", v.gap_test(np.array([0.1, -0.1, 0.05]))) == ""
    assert v.verdict_p(True, word, test) == pytest.approx(test.p_tost(), abs=1e-15)
