"""Synthetic scaling studies drawn from a known law: gap = K (D/N)^A N^B per cell, times
log-normal seed noise, on top of a BF16 loss that is a known function of N and D."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

SIZES = {"s100k": 1e5, "s300k": 3e5, "s800k": 8e5, "s2m": 2e6}
TPP = (2, 5, 10, 20, 40)
K, A, B = 0.5, 0.3, -0.2


def bf16_loss(params: float, tokens: float) -> float:
    """A Chinchilla-like loss from 2.0 to 11.5 over the grid: its log is far from linear in
    log N and log D (least-squares residual RMS 0.10), so a relative and an absolute power law
    in the gap cannot both fit."""
    return float(1.5 + 8.0 * (params / 1e5) ** -1.0 + 2.0 * (tokens / 2e5) ** -0.5)


def make_runs(sigma: float = 0.1, seeds: int = 3, form: str = "relative",
              sizes: Mapping[str, float] = SIZES, tpps: Sequence[float] = TPP,
              data_seed: int = 0) -> pd.DataFrame:
    """BF16 and NVFP4 runs; the ``form`` gap of each seed is K (D/N)^A N^B exp(sigma z)."""
    rng = np.random.default_rng(data_seed)
    rows: list[dict[str, Any]] = []
    for size, n in sizes.items():
        for tpp in tpps:
            tokens = int(tpp * n)
            ref = bf16_loss(n, tokens)
            for seed in range(seeds):
                gap = K * tpp ** A * n ** B * math.exp(sigma * rng.standard_normal())
                fp4 = ref * (1 + gap) if form == "relative" else ref + gap
                rows += [{"size": size, "params": int(n), "tokens": tokens, "recipe": r,
                          "seed": seed, "loss": loss} for r, loss in (("bf16", ref),
                                                                      ("nvfp4", fp4))]
    return pd.DataFrame(rows)


def hand_cell_means(runs: pd.DataFrame, form: str) -> pd.Series:
    """Cell means of the gap computed straight from the runs, keyed (size, tpp)."""
    wide = runs.pivot_table(index=["size", "params", "tokens", "seed"], columns="recipe",
                            values="loss").reset_index()
    gap = wide["nvfp4"] - wide["bf16"]
    wide["g"] = gap / wide["bf16"] if form == "relative" else gap
    wide["tpp"] = wide["tokens"] / wide["params"]
    return wide.groupby(["size", "params", "tpp"])["g"].mean()


def _regressors(means: pd.Series) -> npt.NDArray[np.float64]:
    """Rows (1, log D/N, log N) of the cells of ``means``."""
    params = means.index.get_level_values("params").to_numpy(dtype=float)
    tpp = means.index.get_level_values("tpp").to_numpy(dtype=float)
    return np.column_stack([np.ones(len(means)), np.log(tpp), np.log(params)])


def lstsq_law(means: pd.Series) -> npt.NDArray[np.float64]:
    """(log k, a, b) by numpy's least squares on the logs of the cell means."""
    x = _regressors(means)
    coef: npt.NDArray[np.float64] = np.linalg.lstsq(x, np.log(means.to_numpy()), rcond=None)[0]
    return coef


def lstsq_rms(means: pd.Series) -> float:
    """The residual RMS, in log gap, of ``lstsq_law`` on the cell means."""
    residuals = np.log(means.to_numpy()) - _regressors(means) @ lstsq_law(means)
    return math.sqrt(float(np.mean(residuals ** 2)))
