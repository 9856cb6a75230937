"""Laws with chosen coefficients and refits, nothing fitted: for carrying gaps by hand."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from nvfp4_lab.analysis.laws import steps_law as sl


def law(name: str, coef: Sequence[float], draws: Sequence[Sequence[float]]) -> sl.LawFit:
    """Law ``name`` ("S" or "A") with point coefficients ``coef`` (log k, a, b[, c]) and the
    refits ``draws`` (rows of the same)."""
    names = ("log k", "a", "b", "c")[:len(coef)]
    terms = tuple(sl.Term(n, float(x), 0.0, 0.0, 0.0, 0.0) for n, x in zip(names, coef))
    return sl.LawFit(name, "relative", terms, (), pd.DataFrame(), pd.DataFrame(), (), 0.0,
                     len(draws), 0, 49, np.array(draws, dtype=float))
