"""The report's figures, drawn from ``collect``'s tables with matplotlib.

Every figure has tokens on the x-axis (what the paper plots), units on both axes, the LR-decay
phase shaded where the runs used WSD (the gaps widen there in every figure of the paper), one
colour per recipe that stays the same across the figures of a report (``palette``), and a
legend titled with the config key the recipes differ in. Each function draws into a new
figure and returns it; ``save`` writes PNG and PDF. The backend is the caller's: the command
line picks a headless one (``cli.main``), a notebook shows the figures inline.

    loss_figure              train and val loss vs tokens, mean over seeds and min-max band
    gap_figure               relative loss gap to a baseline over tokens, (recipe - baseline) /
                             baseline x 100%, positive = worse (the paper's Fig. 4, 6a...
                             with its sign turned)
    efficiency_figure        final loss vs training tokens per recipe, the reference's loss as
                             a line, the multiplier each recipe needs to reach it (Fig. 6b)
    layer_error_figure       per-layer relative error of the quantized Wgrad by depth (E06)

The paper's numbers beside ours (``paper_vs_ours``, the forest) are ``paper_figures``.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..inference.gaps import gap_curves
from ..inference.stats import GAP_CONVENTION
from ..sources.comparable import loss_unit

# the paper's formats keep their colour in every report; other labels take the next free one
_FIXED = {"bf16": "black", "fp8": "tab:blue", "mxfp4": "tab:orange", "nvfp4": "tab:green",
          "nvfp4_base": "tab:olive"}
_CYCLE = ["tab:green", "tab:orange", "tab:blue", "tab:red", "tab:purple", "tab:brown",
          "tab:pink", "tab:cyan", "tab:olive", "tab:gray"]
_AXIS_NAMES = {"quant.name": "quant", "arm": "arm"}

plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "legend.fontsize": 8,
                     "axes.grid": True, "grid.alpha": 0.3, "figure.dpi": 100})


def palette(labels: list[str]) -> dict[str, str]:
    """label -> colour, the paper's formats fixed, the rest in order from a cycle."""
    free = iter(c for c in _CYCLE if c not in {_FIXED[lb] for lb in labels if lb in _FIXED})
    return {lb: _FIXED[lb] if lb in _FIXED else next(free, "tab:gray") for lb in labels}


def axis_title(axes: list[str]) -> str:
    """The legend title: the config key(s) the recipes differ in."""
    return ", ".join(_AXIS_NAMES.get(a, a) for a in axes) or "run"


def tokens_text(x: float) -> str:
    """A token count as 150k / 1.2M / 3B (3 significant digits)."""
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.3g}"


def tokens_formatter(ax) -> None:
    """Tokens as 150k / 1.2M / 3B on the x-axis."""
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: tokens_text(x)))
    ax.set_xlabel("training tokens")


LOSS_NAMES = {"train_loss": "train loss", "val_loss": "validation loss"}
TITLE_CHARS = 64      # a title's line on a 6.4-inch figure at 10 pt


def wrapped(title: str, width: int = TITLE_CHARS) -> str:
    """``title`` broken into lines that fit the figure (a long one is cut at both edges)."""
    return textwrap.fill(title, width)


def shade_decay(ax, runs: pd.DataFrame) -> None:
    """Shade the LR-decay phase (WSD) of the runs, when they share one."""
    starts = runs["decay_start"].dropna().unique()
    if len(starts) == 1:
        ax.axvspan(starts[0], runs["tokens"].max(), color="0.85", alpha=0.5, lw=0,
                   label="LR decay")


SMOOTH_SHARE = 0.05   # a smoothed train curve's window: at most this share of its points


def smooth_window(n: int) -> int:
    """The odd number of points a smoothed curve of ``n`` points averages over: the largest
    within SMOOTH_SHARE of them, so 1 (the points as they are) below 3 / SMOOTH_SHARE."""
    k = int(n * SMOOTH_SHARE)
    return k if k % 2 else max(k - 1, 1)


def smoothed(values: pd.Series) -> pd.Series:
    """The mean of the points in a window centred on each (fewer at the ends). An EMA lags a
    falling loss and draws it too high (0.1-0.2 nats on a 60-point curve); a centred mean
    stays within the range of the raw points around it and starts at the first."""
    return values.rolling(smooth_window(len(values)), center=True, min_periods=1).mean()


def _band(ax, df: pd.DataFrame, value: str, colour: str, label: str,
          smooth: bool = False) -> int | None:
    """Mean over seeds as a line, min-max over seeds as a band. df: tokens, seed, value.
    ``smooth``: where the curve has points enough, the mean drawn faint and its centred mean
    on top (a training loss is one batch per point: its noise would hide the recipes'
    differences). Returns the window drawn (1: the points as they are; None: no points)."""
    g = df.dropna(subset=[value]).groupby("tokens")[value]
    stats = pd.DataFrame({"mean": g.mean(), "lo": g.min(), "hi": g.max(), "n": g.size()})
    if stats.empty:
        return None
    window = smooth_window(len(stats)) if smooth else 1
    if window > 1:
        ax.plot(stats.index, stats["mean"], color=colour, lw=0.6, alpha=0.3)
    ax.plot(stats.index, smoothed(stats["mean"]) if window > 1 else stats["mean"],
            color=colour, lw=1.4, label=label, marker="o" if len(stats) < 8 else None, ms=3)
    if (stats["n"] > 1).any():
        ax.fill_between(stats.index, stats["lo"], stats["hi"], color=colour, alpha=0.2, lw=0)
    return window


def smoothing_text(windows: set[int]) -> str:
    """The train panel's title for the windows its curves were drawn with."""
    short = f"fewer than {round(3 / SMOOTH_SHARE)} points"
    sizes = sorted(windows - {1})
    if not sizes:
        return f"train loss as logged (curves of {short}: not smoothed)"
    span = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
    return (f"train loss, centred mean of {span} points (at most {SMOOTH_SHARE:.0%} of a "
            "curve's; raw faint)" + (f"; curves of {short} as logged" if 1 in windows else ""))


def _legend(ax, axes: list[str], n_seeds: int) -> None:
    title = axis_title(axes) + (f" (mean, band: min-max of {n_seeds} seeds)" if n_seeds > 1
                                else "")
    ax.legend(title=title, loc="best", frameon=False)


def loss_figure(runs: pd.DataFrame, curves: pd.DataFrame, axes: list[str],
                colours: dict[str, str]):
    """Train (left) and validation (right) loss vs tokens, one line per recipe."""
    unit = loss_unit(runs)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), sharex=True)
    windows = {}        # metric -> the windows its curves were drawn with
    for ax, metric in ((left, "train_loss"), (right, "val_loss")):
        shade_decay(ax, runs)
        windows[metric] = {_band(ax, curves[curves["label"] == label], metric, colours[label],
                                 label, smooth=ax is left) for label in colours} - {None}
        ax.set_ylabel(f"{LOSS_NAMES[metric]} ({unit})")
        tokens_formatter(ax)
        _clip_warmup(ax, curves, metric)
    left.set_title(smoothing_text(windows["train_loss"]), fontsize=9)
    right.set_title("validation loss (held-out text)", fontsize=9)
    fig.suptitle("Loss vs training tokens (y-axis from 20% of training on: the first descent "
                 "is cut off)", fontsize=10)
    _legend(right, axes, runs["seed"].nunique())
    fig.tight_layout()
    return fig


def _clip_warmup(ax, curves: pd.DataFrame, metric: str) -> None:
    """Start the y-axis where the curves are comparable: the early loss (ln V and the first
    descent) would squash the differences the figure is about."""
    v = curves.dropna(subset=[metric])
    if v.empty:
        return
    late = v[v["tokens"] >= v["tokens"].max() * 0.2][metric]
    lo, hi = late.min(), late.max()
    pad = 0.05 * (hi - lo) if hi > lo else 0.05
    ax.set_ylim(lo - pad, hi + 3 * pad)


def gap_figure(runs: pd.DataFrame, curves: pd.DataFrame, axes: list[str],
               colours: dict[str, str], baseline: str, metric: str):
    """The relative gap of ``metric`` to ``baseline`` over tokens, positive = worse."""
    gaps = gap_curves(curves, baseline, metric)
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    shade_decay(ax, runs)
    ax.axhline(0, color=colours.get(baseline, "black"), lw=1, label=f"{baseline} (baseline)")
    for label in colours:
        g = gaps[gaps["label"] == label].sort_values("tokens")
        if g.empty:
            continue
        ax.plot(g["tokens"], g["mean"], color=colours[label], lw=1.4, label=label,
                marker="o" if len(g) < 8 else None, ms=3)
        if g["lo"].notna().any():
            ax.fill_between(g["tokens"], g["lo"], g["hi"], color=colours[label], alpha=0.2,
                            lw=0)
    name = LOSS_NAMES[metric]
    ax.set_ylabel(f"{name} gap to {baseline}, %\n(recipe - {baseline}) / {baseline}, "
                  f"{GAP_CONVENTION}")
    tokens_formatter(ax)
    n = runs["seed"].nunique()
    ax.legend(title=axis_title(axes) + (f" (paired over {n} seeds, 95% CI)" if n > 1 else ""),
              frameon=False, loc="best")
    ax.set_title(wrapped(f"{name.capitalize()} gap to {baseline} over training (above 0: worse "
                         f"than {baseline})"), fontsize=10)
    fig.tight_layout()
    return fig, gaps


def efficiency_figure(runs: pd.DataFrame, reference: str, table: pd.DataFrame,
                      metric: str = "final_val_loss"):
    """Final loss vs training tokens per recipe (a preset run at several token budgets); the
    reference's loss as a dashed line. Colours are per recipe, not per budget. Runs whose
    losses are in different units are refused (``comparable.loss_unit``): one curve never
    joins them."""
    unit = loss_unit(runs)
    done = runs[runs["status"] == "done"]
    colours = palette(list(dict.fromkeys(done["recipe"])))
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ref = done[done["label"] == reference]
    ax.axhline(ref[metric].mean(), color=colours[ref["recipe"].iloc[0]], ls="--", lw=1,
               label=f"{reference}: {tokens_text(ref['tokens'].mean())} tokens (reference)")
    for recipe, part in done.groupby("recipe", sort=False):
        ax.scatter(part["tokens"], part[metric], color=colours[recipe], s=12, alpha=0.6)
        mean = part.groupby("tokens")[metric].mean()
        row = table[table["recipe"] == recipe]
        note = _multiplier_text(row.iloc[0]) if len(row) else ""
        ax.plot(mean.index, mean.values, color=colours[recipe], lw=1.4, marker="o", ms=4,
                label=f"{recipe}{note}")
    ax.set_ylabel(f"final validation loss ({unit})")
    tokens_formatter(ax)
    ax.legend(title="recipe (line: mean, dots: seeds)", frameon=False, loc="best")
    ax.set_title(wrapped(f"Final loss vs training tokens: what each recipe needs to reach "
                         f"{reference}"), fontsize=10)
    fig.tight_layout()
    return fig


def _multiplier_text(row: pd.Series) -> str:
    if row["status"] == "reached" and np.isfinite(row["multiplier_mean"]):
        return f": needs {row['multiplier_mean']:.2f}x the tokens"
    return f": {row['status']}"


def layer_error_figure(layers: pd.DataFrame, colours: dict[str, str], axes: list[str],
                       metric: str = "wgrad/rel_err"):
    """Mean (over logged steps, layers of a block, seeds) relative error by block index."""
    part = layers[layers["metric"] == metric]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for label in colours:
        g = part[part["label"] == label].groupby("block")["value"]
        if g.ngroups == 0:
            continue
        ax.plot(g.mean().index, g.mean().values, color=colours[label], marker="o", ms=4,
                label=label)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("block (0 = first; blocks kept in BF16 have no point)")
    ax.set_ylabel(f"relative error of {metric.split('/')[0]}\n||Q - exact|| / ||exact||")
    ax.legend(title=axis_title(axes), frameon=False, loc="best")
    ax.set_title("Quantization error of the weight gradient by depth", fontsize=10)
    fig.tight_layout()
    return fig


LAYER_TYPE_METRICS = ("fprop.x/rel_err", "fprop.w/rel_err", "dgrad.dy/rel_err", "wgrad/rel_err")


def layer_type_table(layers: pd.DataFrame,
                     metrics: tuple[str, ...] = LAYER_TYPE_METRICS) -> pd.DataFrame:
    """Mean relative error per layer type and label, over logged steps, blocks and seeds: the
    type is the layer's name after its block index (``blocks.3.mamba.in_proj`` ->
    ``mamba.in_proj``), so a hybrid's Mamba-2, attention and FFN projections, or a
    transformer's qkv, proj, fc1 and fc2, sit side by side. Columns: type, label, and each of
    ``metrics`` that was logged; rows in the order the layers first appear."""
    part = layers[layers["metric"].isin(metrics)]
    if part.empty:
        return pd.DataFrame()
    part = part.assign(type=part["layer"].str.replace(r"^(?:.*\.)?\d+\.", "", regex=True))
    table = part.pivot_table(index=["type", "label"], columns="metric", values="value",
                             aggfunc="mean", sort=False).reset_index()
    return table[["type", "label", *[m for m in metrics if m in table.columns]]]


NOISE_METRIC = "wgrad/noise_ratio"          # logged by quant/stats.py on statistics steps
NOISE_THRESHOLD = 3 ** 0.5   # Chmiel et al.: below it, quantized gradients stop helping


def noise_table(layers: pd.DataFrame) -> pd.DataFrame:
    """The weight-gradient noise ratio over training, per label: for each logged token count
    the median over layers and seeds and the smallest layer's value. Columns label, tokens,
    median, min."""
    part = layers[(layers["metric"] == NOISE_METRIC) & np.isfinite(layers["value"])]
    g = part.groupby(["label", "tokens"], sort=False)["value"]
    return pd.DataFrame({"median": g.median(), "min": g.min()}).reset_index()


def noise_figure(table: pd.DataFrame, colours: dict[str, str], axes: list[str],
                 threshold: float = NOISE_THRESHOLD):
    """``noise_table`` against tokens on a log axis, with the threshold below which quantized
    gradients stop helping (Chmiel et al., "FP4 All the Way", arXiv 2505.19115)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for label in colours:
        t = table[table["label"] == label].sort_values("tokens")
        if t.empty:
            continue
        ax.plot(t["tokens"], t["median"], color=colours[label], marker="o", ms=3, label=label)
        ax.plot(t["tokens"], t["min"], color=colours[label], ls=":", lw=1)
    ax.axhline(threshold, color="tab:red", lw=1, ls="--")
    ax.annotate(f"√3 ≈ {threshold:.2f}: below, FP4 gradients stop helping (Chmiel et al.)",
                (0.01, threshold), xycoords=("axes fraction", "data"), fontsize=7,
                color="tab:red", va="bottom")
    ax.set_yscale("log")
    tokens_formatter(ax)
    ax.set_ylabel("||dW|| / ||dW_q - dW||")
    ax.legend(title=axis_title(axes) + " (solid: median layer, dotted: lowest)",
              frameon=False, loc="best", fontsize=8)
    ax.set_title("Weight-gradient signal to quantization noise over training", fontsize=10)
    fig.tight_layout()
    return fig


def save(fig, directory: Path, name: str, pdf: bool = True) -> list[Path]:
    """Write ``name``.png (150 dpi) and, with ``pdf``, ``name``.pdf; close the figure."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"{name}.png"] + ([directory / f"{name}.pdf"] if pdf else [])
    fig.savefig(paths[0], dpi=150)
    for path in paths[1:]:
        fig.savefig(path)
    plt.close(fig)
    return paths
