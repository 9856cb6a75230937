"""The report's figures, drawn from ``collect``'s tables with matplotlib.

Every figure has tokens on the x-axis (what the paper plots), units on both axes, the LR-decay
phase shaded where the runs used WSD (the gaps widen there in every figure of the paper), one
colour per recipe that stays the same across the figures of a report (``palette``), and a
legend titled with the config key the recipes differ in. Each function draws into a new
figure and returns it; ``save`` writes PNG and PDF.

    loss_figure              train and val loss vs tokens, mean over seeds and min-max band
    gap_figure               relative loss difference vs a baseline over tokens, the paper's
                             convention (ref - exp)/ref x 100%, negative = worse (Fig. 4, 6a...)
    efficiency_figure        final loss vs training tokens per recipe, the reference's loss as
                             a line, the multiplier each recipe needs to reach it (Fig. 6b)
    layer_error_figure       per-layer relative error of the quantized Wgrad by depth (E06)
    paper_figure             the paper's numbers beside ours, both scales in the title
    forest_figure            every claim's gap with its interval, the paper's gap beside it,
                             coloured by verdict (the results index's headline figure)
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .collect import loss_unit  # noqa: E402
from .gaps import gap_curves  # noqa: E402

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


def shade_decay(ax, runs: pd.DataFrame) -> None:
    """Shade the LR-decay phase (WSD) of the runs, when they share one."""
    starts = runs["decay_start"].dropna().unique()
    if len(starts) == 1:
        ax.axvspan(starts[0], runs["tokens"].max(), color="0.85", alpha=0.5, lw=0,
                   label="LR decay")


SMOOTH_SHARE = 0.05   # the smoothed train curve's window: this share of its points (>= 3)


def smooth_window(n: int) -> int:
    """The odd number of points a smoothed curve of ``n`` points averages over."""
    return max(3, round(n * SMOOTH_SHARE)) // 2 * 2 + 1


def smoothed(values: pd.Series) -> pd.Series:
    """The mean of the points in a window centred on each (fewer at the ends). An EMA lags a
    falling loss and draws it too high (0.1-0.2 nats on a 60-point curve); a centred mean
    stays within the range of the raw points around it and starts at the first."""
    return values.rolling(smooth_window(len(values)), center=True, min_periods=1).mean()


def _band(ax, df: pd.DataFrame, value: str, colour: str, label: str,
          smooth: bool = False) -> None:
    """Mean over seeds as a line, min-max over seeds as a band. df: tokens, seed, value.
    ``smooth``: the mean drawn faint and its centred mean on top (a training loss is one
    batch per point: its noise would hide the recipes' differences)."""
    g = df.dropna(subset=[value]).groupby("tokens")[value]
    stats = pd.DataFrame({"mean": g.mean(), "lo": g.min(), "hi": g.max(), "n": g.size()})
    if stats.empty:
        return
    line = smoothed(stats["mean"]) if smooth else stats["mean"]
    if smooth:
        ax.plot(stats.index, stats["mean"], color=colour, lw=0.6, alpha=0.3)
    ax.plot(stats.index, line, color=colour, lw=1.4, label=label,
            marker="o" if len(stats) < 8 else None, ms=3)
    if (stats["n"] > 1).any():
        ax.fill_between(stats.index, stats["lo"], stats["hi"], color=colour, alpha=0.2, lw=0)


def _legend(ax, axes: list[str], n_seeds: int) -> None:
    title = axis_title(axes) + (f" (mean, band: min-max of {n_seeds} seeds)" if n_seeds > 1
                                else "")
    ax.legend(title=title, loc="best", frameon=False)


def loss_figure(runs: pd.DataFrame, curves: pd.DataFrame, axes: list[str],
                colours: dict[str, str]):
    """Train (left) and validation (right) loss vs tokens, one line per recipe."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), sharex=True)
    for ax, metric, name in ((left, "train_loss", "train loss"),
                             (right, "val_loss", "validation loss")):
        shade_decay(ax, runs)
        for label in colours:
            _band(ax, curves[curves["label"] == label], metric, colours[label], label,
                  smooth=metric == "train_loss")
        ax.set_ylabel(f"{name} ({loss_unit(runs)})")
        tokens_formatter(ax)
        _clip_warmup(ax, curves, metric)
    left.set_title(f"train loss, centred mean of {SMOOTH_SHARE:.0%} of the points (raw faint)",
                   fontsize=9)
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
    """Relative loss difference vs ``baseline`` over tokens (paper convention)."""
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
    name = metric.replace("_", " ").replace("val", "validation")
    ax.set_ylabel(f"{name} difference vs {baseline} (%)\n(ref - exp) / ref, negative = worse")
    tokens_formatter(ax)
    n = runs["seed"].nunique()
    ax.legend(title=axis_title(axes) + (f" (paired over {n} seeds, 95% CI)" if n > 1 else ""),
              frameon=False, loc="best")
    ax.set_title(f"Loss gap to {baseline} over training (below 0: worse than {baseline})",
                 fontsize=10)
    fig.tight_layout()
    return fig, gaps


def efficiency_figure(runs: pd.DataFrame, reference: str, table: pd.DataFrame,
                      metric: str = "final_val_loss"):
    """Final loss vs training tokens per recipe (a preset run at several token budgets); the
    reference's loss as a dashed line. Colours are per recipe, not per budget."""
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
    ax.set_ylabel(f"final validation loss ({loss_unit(runs)})")
    tokens_formatter(ax)
    ax.legend(title="recipe (line: mean, dots: seeds)", frameon=False, loc="best")
    ax.set_title(f"Final loss vs training tokens: what each recipe needs to reach {reference}",
                 fontsize=10)
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


def paper_figure(paper, ours: pd.DataFrame, colours: dict[str, str], ours_title: str,
                 baseline: str, unit: str = "nats/token"):
    """Bars of the paper's values (left) beside ours (right, 95% CI over seeds when there are
    several), each bar labelled with its number.

    paper: a PaperResult; ours: label, value, lo, hi in the paper's metric units, gaps
    against ``baseline``; unit: what our losses are per (``collect.loss_unit``), where the
    paper's metric is a loss.
    """
    labels = [lb for lb in colours if lb in paper.values or lb in set(ours["label"])]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    x = np.arange(len(labels))
    o = ours.set_index("label").reindex(labels)
    err = np.vstack([o["value"] - o["lo"], o["hi"] - o["value"]])
    bars = {left: [paper.values.get(lb, np.nan) for lb in labels], right: list(o["value"])}
    for ax, values in bars.items():
        has_err = ax is right and np.isfinite(err).any()
        ax.bar(x, values, color=[colours[lb] for lb in labels], alpha=0.8,
               yerr=np.where(np.isfinite(err), err, 0) if has_err else None, capsize=3)
        for i, v in enumerate(values):
            if np.isfinite(v):
                ax.annotate(f"{v:+.2f}" if paper.metric.endswith("gap_pct") else f"{v:.3f}",
                            (i, v), ha="center", va="top" if v < 0 else "bottom", fontsize=7,
                            xytext=(0, -2 if v < 0 else 2), textcoords="offset points")
        ax.set_xticks(x, labels, rotation=20, ha="right")
        ax.set_xlim(-0.6, len(labels) - 0.4)   # every slot, where the end bars are missing too
        ax.axhline(0, color="black", lw=0.8)
        ax.grid(axis="x", visible=False)
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo - 0.08 * (hi - lo), hi + 0.08 * (hi - lo))  # room for the numbers
    for i, lb in enumerate(labels):
        if lb in paper.outcomes and lb not in paper.values:
            left.annotate(paper.outcomes[lb], (i, 0), rotation=90, ha="center", va="bottom",
                          fontsize=7)
    gap = paper.metric.endswith("gap_pct")
    left.set_ylabel(_METRIC_UNITS[paper.metric]
                    + (f" vs {paper.baseline or 'the paper reference'}" if gap else ""))
    right.set_ylabel(f"validation loss gap (%) vs {baseline}" if gap else
                     f"final validation loss ({unit})")
    left.set_title(f"paper, {paper.figure}: {paper.scale}", fontsize=9)
    right.set_title(ours_title, fontsize=9)
    if gap:
        fig.suptitle("gap = (reference - recipe) / reference x 100: below 0 = higher loss "
                     "than the reference", fontsize=9)
    _same_scale_if_gap(left, right, paper.metric)
    fig.tight_layout()
    return fig


_METRIC_UNITS = {
    "train_loss_gap_pct": "train loss difference (%)",
    "val_loss_gap_pct": "validation loss difference (%)",
    "val_loss": "validation loss (nats/token)",
    "train_loss": "train loss (nats/token)",
    "token_multiplier": "token multiplier (x)",
}


def _same_scale_if_gap(left, right, metric: str) -> None:
    """Relative gaps share units across scales, so they share a y-range; losses do not
    (different data and tokenizers), so each keeps its own."""
    if metric.endswith("gap_pct"):
        lo = min(left.get_ylim()[0], right.get_ylim()[0])
        hi = max(left.get_ylim()[1], right.get_ylim()[1])
        left.set_ylim(lo, hi)
        right.set_ylim(lo, hi)


VERDICT_COLOURS = {"reproduced": "tab:green", "equivalent": "tab:cyan",
                   "rules out the paper's size": "tab:purple", "not resolved": "tab:gray",
                   "contradicted": "tab:red"}


def forest_figure(table: pd.DataFrame):
    """One row per claim, top to bottom: the gap (dot) and its interval (bar) in the verdict's
    colour, the paper's gap as a hollow diamond. table: label, mean, lo, hi, paper_gap,
    verdict (a claim without an interval has NaN lo and hi)."""
    fig, ax = plt.subplots(figsize=(9.5, 1.0 + 0.22 * max(len(table), 1)))
    y = np.arange(len(table))[::-1]
    for yi, r in zip(y, table.itertuples()):
        colour = VERDICT_COLOURS.get(r.verdict, "black")
        ax.plot([r.lo, r.hi], [yi, yi], color=colour, lw=2, solid_capstyle="butt")
        ax.plot([r.mean], [yi], "o", color=colour, ms=4)
        if np.isfinite(r.paper_gap):
            ax.plot([r.paper_gap], [yi], "D", mfc="none", mec="black", ms=5)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(y, table["label"], fontsize=7)
    ax.set_xlabel("gap (a - b) / a x 100 (%) of claim a < b or a ~ b; negative: b has the "
                  "higher loss")
    handles = [plt.Line2D([], [], color=c, lw=2, label=w) for w, c in VERDICT_COLOURS.items()]
    handles.append(plt.Line2D([], [], marker="D", ls="", mfc="none", mec="black",
                              label="the paper's gap"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    ax.grid(axis="y", alpha=0)
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
