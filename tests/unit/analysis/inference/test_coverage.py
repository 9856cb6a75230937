"""analysis.inference.coverage: the verdicts' own-variance interval keeps its 95% at three
seeds, with equal spreads and with one claim's spread twice the others'; Bartlett-then-pool and
a common spread fixed in advance (rebuilt here from scipy, not from the library) do not."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from nvfp4_lab.analysis.inference import coverage as c

BAR = 0.94


def t_interval(gaps: np.ndarray, sd: np.ndarray, df: int) -> tuple[np.ndarray, np.ndarray]:
    """mean -+ t_{0.975, df} sd / sqrt(n), per claim."""
    mean, n = gaps.mean(axis=-1), gaps.shape[-1]
    half = stats.t.ppf(0.975, df) * sd / np.sqrt(n)
    return mean - half, mean + half


def bartlett_p(gaps: np.ndarray) -> np.ndarray:
    """Bartlett's p per class (gaps: classes, k, n; equal n), by its formula."""
    _, k, n = gaps.shape
    var = gaps.var(axis=-1, ddof=1)
    df = k * (n - 1)
    pooled = var.mean(axis=-1)
    corr = 1 + (k / (n - 1) - 1 / df) / (3 * (k - 1))
    t = (df * np.log(pooled) - (n - 1) * np.log(var).sum(axis=-1)) / corr
    return stats.chi2.sf(t, k - 1)


def pretest_then_pool(gaps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Design v2's rule before amendment 8: the pooled spread with the summed df where
    Bartlett's p >= 0.05, else each claim's own."""
    _, k, n = gaps.shape
    var = gaps.var(axis=-1, ddof=1)
    pooled = t_interval(gaps, np.sqrt(var.mean(axis=-1, keepdims=True)), k * (n - 1))
    own = t_interval(gaps, np.sqrt(var), n - 1)
    use = (bartlett_p(gaps) >= 0.05)[:, None]
    return np.where(use, pooled[0], own[0]), np.where(use, pooled[1], own[1])


def fixed_sd(gaps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One common spread fixed in advance (the narrow claims' true 1.0), the class's summed
    degrees of freedom."""
    _, k, n = gaps.shape
    return t_interval(gaps, np.ones(gaps.shape[:-1]), k * (n - 1))


def test_the_bartlett_here_is_scipys():
    gaps, _ = c.simulate(classes=5, ratio=2.0)
    assert bartlett_p(gaps) == pytest.approx([stats.bartlett(*g).pvalue for g in gaps],
                                             rel=1e-10)


def test_own_interval_is_scipys_one_sample_t_interval():
    gaps, _ = c.simulate(classes=2)
    lo, hi = c.own_variance(gaps)
    ci = stats.ttest_1samp(gaps[1, 2], 0.0).confidence_interval(0.95)
    assert (lo[1, 2], hi[1, 2]) == pytest.approx((ci.low, ci.high), abs=1e-12)


@pytest.mark.parametrize("k", [3, 4])
@pytest.mark.parametrize("ratio", [1.0, 2.0])
def test_the_verdicts_rule_covers_95_percent_with_equal_and_unequal_spreads(k, ratio):
    assert c.coverage(c.own_variance, k=k, ratio=ratio) >= BAR


@pytest.mark.parametrize("k", [3, 4])
def test_pretest_then_pool_misses_the_wide_claim(k):
    assert c.coverage(pretest_then_pool, k=k, ratio=2.0) < BAR
    assert c.coverage(pretest_then_pool, k=k, ratio=2.0) < 0.87
    # and is not far off with equal spreads: the failure is the unequal case's
    assert c.coverage(pretest_then_pool, k=k) > 0.93


def test_a_common_spread_fixed_in_advance_misses_the_wide_claim():
    assert c.coverage(fixed_sd, ratio=2.0) < 0.80
    assert c.coverage(fixed_sd) > 0.97          # over-covers the claims it was fixed for


def test_coverage_reads_the_worst_claim():
    """A rule exact for every claim but the first, which it never covers, reads 0."""
    def miss_first(gaps):
        lo, hi = c.own_variance(gaps)
        lo[:, 0] = hi[:, 0] = np.inf
        return lo, hi
    assert c.coverage(miss_first) == 0.0
