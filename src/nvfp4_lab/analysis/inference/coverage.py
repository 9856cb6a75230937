"""How often a rule's nominal 95% interval covers a claim's true gap, by simulation.

A class of k claims, each with n paired seeds of normal gaps around a known true mean: every
claim's spread is sd, or, in the unequal case, the first claim's is ``ratio`` x sd. A rule
turns the gaps, shaped (classes, k, n), into intervals (lo, hi), shaped (classes, k). The
coverage of a claim is the share of simulated classes whose interval holds its true mean; a
rule keeps its 95% only if every claim is covered, so ``coverage`` gives the worst claim's.

``own_variance`` is the verdicts' rule (``verdicts``): each claim's t interval on its own
spread. A rule that pools spreads across the class, or fixes one in advance, covers the wide
claim far less often (tests/unit/analysis/test_coverage.py; the numbers in ``verdicts``).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .verdicts import half_width

CLASSES = 20_000        # simulated classes: the 95% coverage's Monte-Carlo sd is ~0.0015
Rule = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def own_variance(gaps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each claim's 95% t interval on its own spread, n - 1 degrees of freedom."""
    n = gaps.shape[-1]
    mean, half = gaps.mean(axis=-1), half_width(gaps.std(axis=-1, ddof=1), n)
    return mean - half, mean + half


def simulate(k: int = 3, n: int = 3, sd: float = 1.0, ratio: float = 1.0,
             classes: int = CLASSES, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Gaps (classes, k, n) of k claims with true means spread over [-1, 1] and the first
    claim's spread ``ratio`` x sd, from numpy's generator seeded ``seed``; and the means."""
    rng = np.random.default_rng(seed)
    means = np.linspace(-1.0, 1.0, k)
    spread = np.full(k, sd)
    spread[0] *= ratio
    gaps = means[:, None] + spread[:, None] * rng.standard_normal((classes, k, n))
    return gaps, means


def coverage(rule: Rule, k: int = 3, n: int = 3, ratio: float = 1.0,
             classes: int = CLASSES, seed: int = 0) -> float:
    """The worst-covered claim's share of intervals holding its true mean (``simulate``)."""
    gaps, means = simulate(k, n, ratio=ratio, classes=classes, seed=seed)
    lo, hi = rule(gaps)
    return float(((lo <= means) & (means <= hi)).mean(axis=0).min())
