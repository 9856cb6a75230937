"""A scaling study's figures: the gap against tokens per parameter, one line per
model size, with the law fitted to it, the law's prediction of the held-out corner, and the
law's residuals. The numbers come from ``scaling`` and ``holdout``; this module only draws.

Every figure has a log x-axis of D/N ticked at the levels trained, and its legend right of
the axes, where it hides no point. Each size is drawn a few points aside at one D/N (its data
stay where they are), so that sizes trained alike do not hide each other's bars; the held-out
prediction stands one step right of the last size.
"""
from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .holdout import Holdout
from .scaling import FORMS, Fit, cell_table

_BESIDE = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0)}
_STEP = 5 / 72       # inches between the sizes drawn at one D/N


def plot_gaps(gaps: pd.DataFrame, fit: Fit, path, pair: tuple[str, str],
              held: Holdout | None = None) -> plt.Figure:
    """The gap of ``fit``'s form against D/N, one line per size: cell means with their seed t
    intervals as error bars (label: the size), each seed's gap as a ring (gid "seeds") and the
    law dashed (gid "law"); ``held``, the law fitted without the corner, as a black diamond
    with its 95% prediction interval (gid "held-out"). ``pair``: the recipe and the one it is
    against."""
    table = cell_table(gaps, fit.form)
    fig, ax = plt.subplots(figsize=(7.5, 4))
    ax.axhline(0.0, color="0.6", lw=0.8)
    groups, shown = table.groupby(["params", "size"], sort=True), []
    for i, ((params, size), cell) in enumerate(groups):
        aside = _aside(fig, ax, i, len(groups))
        err = np.nan_to_num(np.vstack([cell["mean"] - cell["lo"], cell["hi"] - cell["mean"]]))
        bars = ax.errorbar(cell["tpp"], cell["mean"], err, marker="o", capsize=2, label=size,
                           transform=aside)
        seeds = gaps.loc[gaps["params"] == params, ["tpp", FORMS[fit.form]]].to_numpy()
        ax.plot(*seeds.T, ls="none", marker="o", ms=4, mfc="none", mew=0.8, gid="seeds",
                color=bars.lines[0].get_color(), transform=aside)
        grid = np.geomspace(cell["tpp"].min(), cell["tpp"].max(), 50)
        law = fit.law(params, grid)
        ax.plot(grid, law, ls="--", lw=1, color=bars.lines[0].get_color(), gid="law",
                transform=aside)
        shown += [np.column_stack([cell["tpp"], cell[k].fillna(cell["mean"])])
                  for k in ("lo", "hi")] + [np.column_stack([grid, law]), seeds]
    if held is not None:
        shown.append(_draw_held(fig, ax, held, len(groups)))
    ax.ignore_existing_data_limits = True   # the offset artists' own limits mix in points
    ax.update_datalim(np.vstack(shown))
    ax.autoscale_view()
    _tpp_axis(ax, table["tpp"])
    recipe, against = (f"L_{name.upper()}" for name in pair)
    ax.set_ylabel({"relative": f"({recipe} - {against}) / {against}",
                   "absolute": f"{recipe} - {against}"}[fit.form])
    ax.set_title(f"{pair[0]} against {pair[1]}, {fit.form} gap\n"
                 f"dashed: k (D/N)^a N^b, a = {fit.a:.3g}, b = {fit.b:.3g}")
    ax.legend(title="model size\n(bars: 95% t\nover seeds;\nrings: seeds)", frameon=False,
              fontsize=8, **_BESIDE)
    return _save(fig, path)


def _draw_held(fig, ax, held: Holdout, sizes: int) -> np.ndarray:
    """The prediction at the held-out cell, one step right of the ``sizes`` lines; returns
    the points it spans, for the axis limits."""
    p = held.predicted
    ax.errorbar([held.tpp], [p.gap], [[p.gap - p.lo], [p.hi - p.gap]], marker="D", ms=5,
                mfc="none", color="black", capsize=3, ls="none", gid="held-out",
                label=f"{held.size} predicted\nwithout its cell\n(95% prediction)",
                transform=_aside(fig, ax, sizes, sizes))
    return np.array([[held.tpp, p.lo], [held.tpp, p.hi]])


def plot_residuals(fit: Fit, path, pair: tuple[str, str]) -> plt.Figure:
    """Each used cell's residual, log observed - log fitted, against D/N (log x), one marker
    series per size (label: the size); ``pair`` as in ``plot_gaps``."""
    fig, ax = plt.subplots(figsize=(7.5, 3.5))
    ax.axhline(0.0, color="0.6", lw=0.8)
    for size in dict.fromkeys(c.size for c in sorted(fit.cells, key=lambda c: c.params)):
        mine = [(c.tpp, r) for c, r in zip(fit.cells, fit.residuals) if c.size == size]
        ax.plot(*zip(*mine), "o", ms=4, label=size)
    _tpp_axis(ax, [c.tpp for c in fit.cells])
    ax.set_ylabel("log observed - log fitted gap")
    ax.set_title(f"{pair[0]} against {pair[1]}: {fit.form} law residuals, RMS {fit.rms:.3g}")
    ax.legend(title="model size", frameon=False, fontsize=8, **_BESIDE)
    return _save(fig, path)


def _aside(fig, ax, i: int, n: int):
    """Data coordinates shifted right by the ``i``-th of ``n`` steps centred on the point."""
    return ax.transData + matplotlib.transforms.ScaledTranslation(
        (i - (n - 1) / 2) * _STEP, 0, fig.dpi_scale_trans)


def _tpp_axis(ax, tpp) -> None:
    """A log x-axis of tokens per parameter, ticked at the levels trained (two significant
    digits: a small model's whole steps give 2.03 where the grid asked for 2)."""
    ticks = sorted({float(f"{t:.2g}") for t in tpp})
    ax.set_xscale("log")
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("training tokens per parameter D/N")


def _save(fig, path) -> plt.Figure:
    """Write ``fig`` to ``path``, close it, return it (its artists stay readable)."""
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return fig
