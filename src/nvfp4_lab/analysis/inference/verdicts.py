"""Verdicts a statistician would sign: each claim's own paired gaps, equivalence for nulls,
multiplicity, and the fresh seeds a claim needs.

A claim ``a < b`` (``a ~ b``) is tested on its paired gaps, one per seed s,

    g_s = (loss_b - loss_a) / loss_a * 100           (positive: b has the higher loss),

with mean g, sample variance s^2 (ddof 1) over n seeds and standard error se = s / sqrt(n).

Each claim keeps its own variance, with n - 1 degrees of freedom. No spread is pooled across
claims and no pretest picks a rule: at n = 3 Bartlett's test has almost no power, and the
claims of a class share arms, so a pooled df (t(8) = 2.31 where t(2) = 4.30) claims more
information than the runs hold. Simulated (``coverage``: 3 claims of 3 normal paired seeds,
20000 classes, the worst-covered claim), the own-variance interval covers 95% with equal
spreads and 95% when one claim's spread is twice the others'; Bartlett-then-pool (the rule of
design v2 until amendment 8) 94% and 86%; one common spread fixed in advance 98.5% and 78%.

Tests, all with Student's t at df = n - 1:

    interval    g -+ t_{0.975, df} se                     (95%, two-sided)
    difference  p = 2 P(T > |g| / se)
    TOST        p = max(P(T > (g + m) / se), P(T < (g - m) / se)) at margin m: the null
                "|mu| >= m" is rejected, i.e. the gap is equivalent to 0, when p < 0.05,
                which is the 90% interval g -+ t_{0.95, df} se lying inside (-m, m)

Verdicts: ``a < b`` is *reproduced* when the interval lies above 0, *contradicted* below it,
else *not resolved*; ``a ~ b``
is *equivalent* when TOST passes (even where the 95% interval excludes 0: both are said,
``note``), else *contradicted* when the 95% interval excludes 0, else *not resolved*. Arms
whose gaps are all exactly 0 (bit-identical runs) are *not testable*. What a claim says about
the paper's size is apart from its verdict (``carry``: the paper's gap carried to the lab's
regime, or not comparable at this scale); amendment 9 retired the verdict *rules out the
paper's size*, which set a gap at 0.74M parameters against one at 1.2-12B.

The margin, m = 0.5% of the loss, was fixed before the nulls ran (results/preregistration.md,
Design v2). It is wider than the smallest differences the paper's claim files draw (0.12%,
E02's ``full < without_2d``; 0.15% and 0.15%, E05's ``4_plus_sr < 3_plus_rht`` and E02's
``full < fewer_bf16_blocks``; 0.19% and 0.39%, E08's ``none < dgrad`` and ``none < fprop``):
an *equivalent* says no difference as large as 0.5% of the loss, not that none of the size the
paper reports exists. A new margin is an amendment written before the runs it governs.

Multiplicity over k claims with p-values p_(1) <= ... <= p_(k): Holm's adjusted
p_(i) = max_{j <= i} min(1, (k - j + 1) p_(j)) (family-wise error), Benjamini-Hochberg's
p_(i) = min_{j >= i} min(1, k p_(j) / j) (false discovery rate, scipy).

Seeds needed: the smallest n >= 2 whose two-sided 5% paired t-test has 80% power against a
true gap d with spread sigma, power(n) = P(|T'| > t_{0.975, n-1}), T' noncentral t with n - 1
degrees of freedom and noncentrality d sqrt(n) / sigma; for a null, the n at which TOST passes
with 80% when the true gap is 0, power(n) = 1 - 2 P(T' <= t_{0.95, n-1}) with noncentrality
m sqrt(n) / sigma.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

LEVEL = 0.95
ALPHA = 0.05
POWER = 0.8
MARGIN_PCT = 0.5            # TOST margin, pre-registered (results/preregistration.md)
MAX_SEEDS = 10_000          # seeds needed beyond this read "> 10000"
# the verdict words, most decisive first (index tallies keep this order)
VERDICTS = ("reproduced", "equivalent", "not resolved", "contradicted", "too few seeds",
            "not testable", "not run")
RESOLVED = ("reproduced", "equivalent", "contradicted")


def half_width(sd, n, level: float = LEVEL):
    """Half the two-sided ``level`` t interval of a mean of n paired gaps with spread sd, at
    n - 1 degrees of freedom (numpy arrays too)."""
    return stats.t.ppf((1 + level) / 2, np.asarray(n) - 1) * sd / np.sqrt(n)


@dataclass(frozen=True)
class GapTest:
    """A claim's gaps tested on their own spread: n seeds, mean, sd (ddof 1), df n - 1."""

    n: int
    mean: float
    sd: float

    @property
    def df(self) -> int:
        return self.n - 1

    @property
    def se(self) -> float:
        return self.sd / math.sqrt(self.n)

    @property
    def half(self) -> float:
        return float(half_width(self.sd, self.n))

    @property
    def lo(self) -> float:
        return self.mean - self.half

    @property
    def hi(self) -> float:
        return self.mean + self.half

    @property
    def excludes_zero(self) -> bool:
        return self.lo > 0 or self.hi < 0

    def p_against(self, value: float = 0.0) -> float:
        """Two-sided p of the gap against ``value``."""
        return float(2 * stats.t.sf(abs(self.mean - value) / self.se, self.df))

    def p_tost(self, margin: float = MARGIN_PCT) -> float:
        """TOST p at ``margin``: below ALPHA means equivalent to 0."""
        return float(max(stats.t.sf((self.mean + margin) / self.se, self.df),
                         stats.t.cdf((self.mean - margin) / self.se, self.df)))


def degenerate(gaps: np.ndarray) -> bool:
    """Every paired gap exactly 0: the two arms ran the same computation."""
    return len(gaps) > 0 and bool(np.all(gaps == 0.0))


def gap_test(gaps: np.ndarray) -> GapTest:
    """The claim's test on its own spread."""
    return GapTest(len(gaps), float(np.mean(gaps)), float(np.std(gaps, ddof=1)))


def verdict(same: bool, test: GapTest, margin: float = MARGIN_PCT) -> str:
    """The verdict word (module docstring) of a tested claim."""
    if same:
        if test.p_tost(margin) < ALPHA:
            return "equivalent"
        return "contradicted" if test.excludes_zero else "not resolved"
    if test.lo > 0:
        return "reproduced"
    return "contradicted" if test.hi < 0 else "not resolved"


def note(same: bool, word: str, test: GapTest) -> str:
    """What the verdict word leaves out: an equivalent null whose 95% interval excludes 0."""
    if same and word == "equivalent" and test.excludes_zero:
        return "equivalent; its 95% interval also excludes 0"
    return ""


def verdict_p(same: bool, word: str, test: GapTest, margin: float = MARGIN_PCT) -> float:
    """The p-value behind a verdict, for the multiplicity corrections."""
    if word == "equivalent" or (same and word == "not resolved"):
        return test.p_tost(margin)
    return test.p_against(0.0)


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values, in the input's order."""
    p = np.asarray(p, dtype=float)
    order = np.argsort(p, kind="stable")
    scaled = (len(p) - np.arange(len(p))) * p[order]
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return adjusted


def bh(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (scipy), in the input's order."""
    return stats.false_discovery_control(np.asarray(p, dtype=float), method="bh")


def power(n: int, gap: float, sd: float, alpha: float = ALPHA) -> float:
    """Power of the two-sided paired t-test with n seeds against a true gap with spread sd."""
    df = n - 1
    crit = stats.t.ppf(1 - alpha / 2, df)
    nc = abs(gap) * math.sqrt(n) / sd
    # the far tail P(T' < -crit) is below 1e-20 where scipy returns NaN for it (large nc)
    return float(stats.nct.sf(crit, df, nc) + np.nan_to_num(stats.nct.cdf(-crit, df, nc)))


def tost_power(n: int, sd: float, margin: float = MARGIN_PCT, alpha: float = ALPHA) -> float:
    """Power of TOST at ``margin`` with n seeds when the true gap is 0: one minus both tails,
    1 - 2 P(T' <= t_{1-alpha, n-1}), T' noncentral t with noncentrality margin sqrt(n) / sd."""
    df = n - 1
    crit = stats.t.ppf(1 - alpha, df)
    return float(max(0.0, 1 - 2 * stats.nct.cdf(crit, df, margin * math.sqrt(n) / sd)))


def seeds_needed(gap: float | None, sd: float, target: float = POWER,
                 equivalence: bool = False) -> int | None:
    """Paired seeds for ``target`` power against ``gap`` (or, with ``equivalence``, for TOST
    to pass when the true gap is 0); None without a gap or a spread, and MAX_SEEDS + 1 when
    more than MAX_SEEDS would be needed."""
    if not sd > 0 or (not equivalence and (gap is None or not math.isfinite(gap) or gap == 0)):
        return None
    reach = (lambda n: tost_power(n, sd)) if equivalence else (lambda n: power(n, gap, sd))
    lo, hi = 2, 2
    while reach(hi) < target:
        if hi > MAX_SEEDS:
            return MAX_SEEDS + 1
        lo, hi = hi, hi * 2
    while lo < hi:                       # power grows with n: bisect for the smallest
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if reach(mid) < target else (lo, mid)
    return hi


def seeds_text(n: int | None) -> str:
    if n is None:
        return ""
    return f"> {MAX_SEEDS}" if n > MAX_SEEDS else str(n)
