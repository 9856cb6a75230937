"""Synthetic grids and steps-or-size studies drawn from a known law in steps:
gap = K (D/N)^A N^B S^C per cell (S = ceil(D / tokens a step), as a run trains), times
log-normal seed noise, as collect's runs table (one row per finished run)."""
from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

SIZES = {"w32": 46_432, "w64": 185_024, "w96": 415_776, "nano": 738_688}
K, A, B, C = 0.4, 0.5, 0.1, -0.4


def law(params: float, tpp: float, steps: float) -> float:
    """The relative gap the runs are drawn from."""
    return float(K * tpp ** A * params ** B * steps ** C)


def runs(cells: Iterable[tuple[str, float, int]], seeds: int = 3, sigma: float = 0.0,
         data_seed: int = 0) -> pd.DataFrame:
    """BF16 and NVFP4 runs of each (size, D/N, tokens a step) cell; the NVFP4 loss is the
    BF16 loss times (1 + law x exp(sigma z))."""
    rows = []
    for size, tpp, per_step in cells:
        n = SIZES[size]
        steps = math.ceil(tpp * n / per_step)
        ref = 1.5 + 3e4 / n + 1e3 / (steps * per_step) ** 0.5
        for seed in range(seeds):
            z = np.random.default_rng([data_seed, n, per_step, steps, seed]).standard_normal()
            g = law(n, steps * per_step / n, steps) * math.exp(sigma * z)
            rows += [{"model": size, "params": n, "tokens": steps * per_step, "steps": steps,
                      "recipe": recipe, "seed": seed, "status": "done", "final_val_loss": loss}
                     for recipe, loss in (("bf16", ref), ("nvfp4", ref * (1 + g)))]
    return pd.DataFrame(rows)


def grid_cells(tpps: Iterable[float] = (2, 5, 10, 20, 40)) -> list[tuple[str, float, int]]:
    """The scaling grid's cells: every size at every D/N, 2048 tokens a step."""
    return [(size, tpp, 2048) for size in SIZES for tpp in tpps]


def study_cells() -> list[tuple[str, float, int]]:
    """The steps-or-size study's cells: w64 and w32 at D/N 20 in 512, 2048, 8192 a step."""
    return [(size, 20, per_step) for size in ("w64", "w32") for per_step in (512, 2048, 8192)]
