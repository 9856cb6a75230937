"""The paper's numbers beside ours, drawn with matplotlib (``figures`` sets the style).

    paper_figure      the paper's bars beside ours (a report's ``paper_vs_ours``): each panel
                      names its loss and scale, our bars carry the interval the verdict uses
    forest_figure     every claim's gap with its interval, the paper's gap beside it,
                      coloured by verdict (the results index's headline figure)
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..inference.stats import CLAIM_CONVENTION, CLAIM_GAP, GAP_CONVENTION
from ..sources.paper import GAP_METRICS
from .figures import wrapped


def paper_figure(paper, ours: pd.DataFrame, colours: dict[str, str], ours_title: str,
                 baseline: str, unit: str = "nats/token"):
    """Bars of the paper's values (left) beside ours (right, with the interval our verdict
    uses), each number beyond its bar's error bar and an empty slot marked "n/a". Each panel
    names its loss; they share a y-range only where both show the same one (a gap in
    validation loss), so that a train-loss gap at the paper's scale is not read on the axis
    of our validation-loss gap.

    paper: a PaperResult; ours: label, value, lo, hi in the paper's metric units, gaps
    against ``baseline``; unit: what our losses are per (``collect.loss_unit``), where the
    paper's metric is a loss.
    """
    labels = [lb for lb in colours if lb in paper.values or lb in set(ours["label"])]
    gap = paper.metric in GAP_METRICS
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    o = ours.set_index("label").reindex(labels)
    none = np.full(len(labels), np.nan)
    _bar_panel(left, labels, [paper.values.get(lb, np.nan) for lb in labels], none, none,
               colours, gap, blank=set(paper.outcomes))
    _bar_panel(right, labels, o["value"], o["lo"], o["hi"], colours, gap)
    for i, lb in enumerate(labels):
        if lb in paper.outcomes and lb not in paper.values:
            left.annotate(paper.outcomes[lb], (i, 0), rotation=90, ha="center", va="bottom",
                          fontsize=7)
    left.set_ylabel(_METRIC_UNITS[paper.metric]
                    + (f" vs {paper.baseline or 'the paper reference'}" if gap else ""))
    right.set_ylabel(f"validation loss gap to {baseline}, % ({GAP_CONVENTION})" if gap else
                     f"final validation loss ({unit})")
    left.set_title(wrapped(f"paper, {paper.figure}: {paper.scale}", 56), fontsize=9)
    right.set_title(wrapped(ours_title, 56), fontsize=9)
    if gap:
        fig.suptitle(f"gap = (recipe - reference) / reference x 100, {GAP_CONVENTION}"
                     + ("" if paper.metric == "val_loss_gap_pct" else
                        "; the panels measure different losses at different scales, each on "
                        "its own axis"), fontsize=9)
    if paper.metric == "val_loss_gap_pct":
        _same_range(left, right)
    fig.tight_layout()
    return fig


def _bar_panel(ax, labels: list[str], values, lo, hi, colours: dict[str, str], gap: bool,
               blank: set[str] = frozenset()) -> None:
    """One panel of ``paper_figure``: a bar per label with its interval [lo, hi] where known,
    its number beyond the interval's end, "n/a" in a slot with no value (and no ``blank``
    note)."""
    v, lo, hi = (np.asarray(a, dtype=float) for a in (values, lo, hi))
    known = np.isfinite(lo) & np.isfinite(hi)
    err = np.vstack([np.where(known, v - lo, 0), np.where(known, hi - v, 0)])
    ax.bar(np.arange(len(labels)), v, color=[colours[lb] for lb in labels], alpha=0.8,
           yerr=err if known.any() else None, capsize=3)
    for i, (value, label) in enumerate(zip(v, labels)):
        if not np.isfinite(value):
            if label not in blank:
                ax.annotate("n/a", (i, 0), ha="center", va="bottom", fontsize=7, color="0.4",
                            xytext=(0, 2), textcoords="offset points")
            continue
        down = value < 0
        end = (lo[i] if down else hi[i]) if known[i] else value
        ax.annotate(f"{value:+.2f}" if gap else f"{value:.3f}", (i, end), ha="center",
                    va="top" if down else "bottom", fontsize=7, xytext=(0, -2 if down else 2),
                    textcoords="offset points")
    ax.set_xticks(np.arange(len(labels)), labels, rotation=20, ha="right")
    ax.set_xlim(-0.6, len(labels) - 0.4)   # every slot, where the end bars are missing too
    ax.axhline(0, color="black", lw=0.8)
    ax.grid(axis="x", visible=False)
    bottom, top = ax.get_ylim()
    ax.set_ylim(bottom - 0.12 * (top - bottom), top + 0.12 * (top - bottom))  # the numbers


_METRIC_UNITS = {
    "train_loss_gap_pct": f"train loss gap, % ({GAP_CONVENTION})",
    "val_loss_gap_pct": f"validation loss gap, % ({GAP_CONVENTION})",
    "val_loss": "validation loss (nats/token)",
    "train_loss": "train loss (nats/token)",
    "token_multiplier": "token multiplier (x)",
}


def _same_range(left, right) -> None:
    """One y-range over both panels (the same quantity, so the same axis)."""
    lo = min(left.get_ylim()[0], right.get_ylim()[0])
    hi = max(left.get_ylim()[1], right.get_ylim()[1])
    left.set_ylim(lo, hi)
    right.set_ylim(lo, hi)


VERDICT_COLOURS = {"reproduced": "tab:green", "equivalent": "tab:cyan",
                   "not resolved": "tab:gray", "contradicted": "tab:red"}


def forest_figure(table: pd.DataFrame):
    """One row per claim, top to bottom: the gap (dot) and its interval (bar) in the verdict's
    colour, the paper's gap as a hollow diamond; the legend names the verdicts drawn. table:
    label, mean, lo, hi, paper_gap, verdict (a claim without an interval has NaN lo and hi),
    and, optional, carried_lo and carried_hi: the paper's gap carried to the lab, drawn as a
    dotted black bar just below the claim's."""
    fig, ax = plt.subplots(figsize=(9.5, 1.0 + 0.22 * max(len(table), 1)))
    y = np.arange(len(table))[::-1]
    for yi, r in zip(y, table.itertuples()):
        colour = VERDICT_COLOURS.get(r.verdict, "black")
        ax.plot([r.lo, r.hi], [yi, yi], color=colour, lw=2, solid_capstyle="butt")
        ax.plot([r.mean], [yi], "o", color=colour, ms=4)
        if np.isfinite(r.paper_gap):
            ax.plot([r.paper_gap], [yi], "D", mfc="none", mec="black", ms=5)
        if np.isfinite(getattr(r, "carried_lo", np.nan)):
            ax.plot([r.carried_lo, r.carried_hi], [yi - 0.3, yi - 0.3], ":", color="black",
                    lw=1.5)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(y, table["label"], fontsize=7)
    ax.set_xlabel(f"claim gap {CLAIM_GAP} (%) of a < b or a ~ b; {CLAIM_CONVENTION}")
    handles = [plt.Line2D([], [], color=c, lw=2, label=w) for w, c in VERDICT_COLOURS.items()
               if w in set(table["verdict"])]
    handles.append(plt.Line2D([], [], marker="D", ls="", mfc="none", mec="black",
                              label="the paper's gap"))
    if np.isfinite(pd.to_numeric(table.get("carried_lo", pd.Series(dtype=float)))).any():
        handles.append(plt.Line2D([], [], ls=":", color="black",
                                  label="the paper's gap carried to the lab"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    ax.grid(axis="y", alpha=0)
    fig.tight_layout()
    return fig
