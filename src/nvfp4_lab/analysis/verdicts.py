"""Verdicts a statistician would sign: pooled paired gaps, equivalence for nulls, the paper's
size, multiplicity, and the seeds a claim needs.

A claim ``a < b`` (``a ~ b``) is tested on its paired gaps, one per seed s,

    g_s = (loss_a - loss_b) / loss_a * 100           (negative: b has the higher loss),

with mean g, sample variance s^2 (ddof 1) over n seeds and standard error se = s / sqrt(n).

Pooled variance. The claims of one comparison class (all FP4-against-FP4 claims of a table, or
all those against BF16, whose spread is about twenty times smaller) share one seed spread
when Bartlett's test of equal variances gives p >= 0.05 (results/preregistration.md, Design
v2). Their pooled variance and degrees of freedom are then

    s_p^2 = sum_i (n_i - 1) s_i^2 / sum_i (n_i - 1),      df = sum_i (n_i - 1),

and claim i uses se_i = s_p / sqrt(n_i) with df; otherwise s_i with n_i - 1. The claims of a
class may share arms, so their variances are not independent and df is an upper bound.

Tests, all with Student's t at df:

    interval    g -+ t_{0.975, df} se                     (95%, two-sided)
    difference  p = 2 P(T > |g| / se)
    TOST        p = max(P(T > (g + m) / se), P(T < (g - m) / se)) at margin m: the null
                "|mu| >= m" is rejected, i.e. the gap is equivalent to 0, when p < 0.05
    paper size  p = 2 P(T > |g - d| / se) against the paper's gap d for the claim

Verdicts: ``a < b`` is *reproduced* when the interval lies below 0, *contradicted* above it,
*rules out the paper's size* when it includes 0 but excludes d, else *not resolved*; ``a ~ b``
is *contradicted* when the interval excludes 0, *equivalent* when TOST passes, else *not
resolved*. Arms whose gaps are all exactly 0 (bit-identical runs) are *not testable*.

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
VERDICTS = ("reproduced", "equivalent", "rules out the paper's size", "not resolved",
            "contradicted", "too few seeds", "not testable", "not run")
RESOLVED = ("reproduced", "equivalent", "rules out the paper's size", "contradicted")


@dataclass(frozen=True)
class Pool:
    """One comparison class: how many claims, Bartlett's p, and the pooled spread when used."""

    cls: str
    claims: int
    p_bartlett: float          # NaN when fewer than two claims can be compared
    sd: float
    df: int
    pooled: bool


@dataclass(frozen=True)
class GapTest:
    """A claim's gaps tested: n seeds, mean, the spread used (own or pooled) and its df."""

    n: int
    mean: float
    sd: float
    df: int
    pooled: bool

    @property
    def se(self) -> float:
        return self.sd / math.sqrt(self.n)

    @property
    def half(self) -> float:
        return stats.t.ppf((1 + LEVEL) / 2, self.df) * self.se

    @property
    def lo(self) -> float:
        return self.mean - self.half

    @property
    def hi(self) -> float:
        return self.mean + self.half

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


def pool(cls: str, samples: list[np.ndarray]) -> Pool:
    """Bartlett's check over a class's claims (those with >= 2 seeds and a spread) and their
    pooled spread, used only when the check passes."""
    usable = [g for g in samples if len(g) >= 2 and np.var(g) > 0]
    df = sum(len(g) - 1 for g in usable)
    sd = math.sqrt(sum((len(g) - 1) * np.var(g, ddof=1) for g in usable) / df) if df else math.nan
    if len(usable) < 2:
        return Pool(cls, len(usable), math.nan, sd, df, False)
    p = float(stats.bartlett(*usable).pvalue)
    return Pool(cls, len(usable), p, sd, df, p >= ALPHA)


def gap_test(gaps: np.ndarray, used: Pool | None = None) -> GapTest:
    """The claim's test with its own spread, or the class's pooled one when that passed."""
    n = len(gaps)
    if used is not None and used.pooled:
        return GapTest(n, float(np.mean(gaps)), used.sd, used.df, True)
    return GapTest(n, float(np.mean(gaps)), float(np.std(gaps, ddof=1)), n - 1, False)


def verdict(same: bool, test: GapTest, paper_gap: float | None = None,
            margin: float = MARGIN_PCT) -> str:
    """The verdict word (module docstring) of a tested claim."""
    if same:
        if test.lo > 0 or test.hi < 0:
            return "contradicted"
        return "equivalent" if test.p_tost(margin) < ALPHA else "not resolved"
    if test.hi < 0:
        return "reproduced"
    if test.lo > 0:
        return "contradicted"
    if paper_gap is not None and paper_gap < test.lo:
        return "rules out the paper's size"
    return "not resolved"


def verdict_p(same: bool, word: str, test: GapTest, paper_gap: float | None,
              margin: float = MARGIN_PCT) -> float:
    """The p-value behind a verdict, for the multiplicity corrections."""
    if word == "equivalent" or (same and word == "not resolved"):
        return test.p_tost(margin)
    if word == "rules out the paper's size":
        return test.p_against(paper_gap)
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
