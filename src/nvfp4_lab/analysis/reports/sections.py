"""The markdown of a sweep's report, one function per section, each from the table it shows.

``report.write_report`` decides which sections a sweep gets and writes their tables and
figures; this module only says how each one reads. ``md_table`` renders any table the same way
everywhere (floats to 4 decimals), the results index's included.
"""
from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..inference import verdicts as v
from ..inference.stats import GAP_CONVENTION
from ..sources.collect import Collection
from ..sources.paper import GAP_METRICS, PaperResult, paper_ordering_agrees
from . import figures


def models_text(runs: pd.DataFrame) -> str:
    """The models of collect's runs table, ``nano`` or ``hybrid_nano, nano``; "?" if none."""
    return ", ".join(sorted(map(str, runs["model"].dropna().unique()))) or "?"


def scale_text(runs: pd.DataFrame) -> str:
    """``nano (bytes), 410k tokens, 3 seeds`` from collect's runs table."""
    models = models_text(runs)
    tokenizers = sorted(map(str, runs.get("data.tokenizer", pd.Series()).dropna().unique()))
    models += f" ({', '.join(tokenizers)})" if tokenizers else ""
    tokens = runs["tokens"].dropna()
    span = (f"{figures.tokens_text(tokens.min())}" if tokens.nunique() <= 1 else
            f"{figures.tokens_text(tokens.min())}-{figures.tokens_text(tokens.max())}")
    seeds = runs["seed"].nunique()
    return f"{models}, {span} tokens, {seeds} seed{'' if seeds == 1 else 's'}"


def header(coll: Collection, ablation, paper, base: str, sources: list[str | Path],
           recipes: bool = True) -> str:
    """The report's title and opening: what it was generated from (the runs and sweeps
    given, not the folder it is written to), how many runs, which recipes."""
    status = coll.runs["status"].value_counts()
    lines = [f"# {ablation or 'comparison'}" + (f": paper {paper.experiment}, {paper.figure}"
                                                 if paper else ""),
             "",
             f"Generated {dt.datetime.now():%Y-%m-%d %H:%M} from "
             + ", ".join(f"`{s}`" for s in sources) + ": "
             f"{status.get('done', 0)} runs done, {status.get('running', 0)} still running, "
             f"{len(coll.skipped)} skipped (failed, diverged or unreadable).",
             "",
             f"Recipes, by `{figures.axis_title(coll.axes)}`: "
             + ", ".join(f"`{lb}`" for lb in coll.labels) + f"; baseline `{base}`. "
             f"Scale: {scale_text(coll.runs)}."]
    return "\n".join(lines if recipes else lines[:-2])


_STAMP = re.compile(r"^Generated \d{4}-\d{2}-\d{2} \d{2}:\d{2}", re.M)


def undated(report: str) -> str:
    """A report less ``header``'s date: two reports that differ only there say the same."""
    return _STAMP.sub("Generated", report, count=1)


def fmt(x, digits=4) -> str:
    return "" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{digits}f}"


def signed(x: float | None, digits: int = 2) -> str:
    """A gap with its sign always written (+1.76, -0.31); "" for none."""
    return "" if x is None or not np.isfinite(x) else f"{x:+.{digits}f}"


def final_loss_md(table: pd.DataFrame, base: str, unit: str) -> str:
    rows = []
    for r in table.itertuples():
        ci = f"[{fmt(r.ci_lo)}, {fmt(r.ci_hi)}]" if np.isfinite(r.ci_lo) else ""
        gap = "" if r.label == base else signed(r.gap_pct)
        gci = f"[{signed(r.gap_lo)}, {signed(r.gap_hi)}]" if np.isfinite(r.gap_lo) else ""
        seeds = v.seeds_text(None if pd.isna(r.seeds_80) else int(r.seeds_80))
        rows.append(f"| `{r.label}` | {r.n} | {fmt(r.mean)} | {fmt(r.sd)} | {ci} | {gap} | "
                    f"{gci} | {r.verdict} | {seeds} |")
    return (f"## Final validation loss ({unit})\n\n"
            f"Gap = (recipe - baseline) / baseline x 100%, per seed against `{base}` of the "
            f"same seed (paired), then averaged; {GAP_CONVENTION} than the baseline. A verdict "
            "is given only when the gap's own 95% interval excludes zero; seeds for 80%: "
            "the paired seeds a two-sided 5% test needs at this gap "
            "(analysis/inference/verdicts.py)."
            "\n\n"
            f"| recipe | seeds | mean | sd | 95% CI | gap to {base}, % ({GAP_CONVENTION}) | "
            "gap 95% CI | verdict | seeds for 80% |\n"
            "|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows))


def repeats_md(runs: pd.DataFrame) -> str:
    """A note naming the seeds run more than once (averaged: a repeat is not a new sample)."""
    done = runs[runs["status"] == "done"]
    counts = done.groupby(["label", "seed"], sort=False).size()
    repeats = [f"`{label}` seed {seed} x{n}" for (label, seed), n in counts.items() if n > 1]
    return ("" if not repeats else "\n\nSeeds run more than once, averaged into one sample "
            "each (a repeat of a seed is not an independent sample): " + ", ".join(repeats)
            + ".")


def efficiency_md(eff: pd.DataFrame, reference: str) -> str:
    return (f"## Token efficiency\n\nTokens each recipe needs to reach `{reference}`'s final "
            "validation loss, as a multiple of its tokens, interpolated linearly between the "
            "budgets that were run (per seed, then averaged).\n\n"
            + _multiplier_md(eff.rename(columns={"recipe": "label"}), reference))


def curve_efficiency_md(approx: pd.DataFrame, reference: str) -> str:
    return ("## Token efficiency (approximate)\n\nTokens at which each recipe's validation "
            f"curve first reaches `{reference}`'s final loss, as a multiple of `{reference}`'s "
            "tokens. Approximate: partway through a run the learning rate has not decayed, so "
            "this is not the loss a run scheduled for that length would reach; run "
            "`+ablation=token_efficiency` for the real measurement.\n\n"
            + _multiplier_md(approx, reference))


def _multiplier_md(eff: pd.DataFrame, reference: str) -> str:
    """A token-multiplier table (``gaps.efficiency_table`` / ``curve_efficiency_table``) as a
    reader wants it: a sentence when no recipe reached the target (an all-empty table says
    nothing), else one row per recipe with its multiplier, range over seeds and status."""
    never = eff["status"].str.startswith("never")
    if never.all():
        within = ", ".join(sorted(set(eff["status"].str.removeprefix("never within "))))
        return (f"No recipe reached `{reference}`'s final validation loss within its tokens "
                f"({within} of `{reference}`'s) on any seed: "
                + ", ".join(f"`{r.label}` ({r.n_seeds} seed{'' if r.n_seeds == 1 else 's'})"
                            for r in eff.itertuples())
                + ". Each needs more tokens than were run; how many more is not measured here.")
    rows = []
    for r in eff.itertuples():
        bound = "≤ " if r.upper_bound else ""
        value = "—" if pd.isna(r.multiplier_mean) else f"{bound}{r.multiplier_mean:.3f}×"
        spread = ("—" if pd.isna(r.multiplier_lo) else
                  f"{r.multiplier_lo:.3f}–{r.multiplier_hi:.3f}×")
        budgets = {"budgets run": r.budgets} if "budgets" in eff else {}
        rows.append({"recipe": f"`{r.label}`", "seeds": r.n_seeds, **budgets,
                     f"tokens to reach `{reference}` (× its tokens)": value,
                     "95% interval": spread, "status": r.status})
    return md_table(pd.DataFrame(rows)) + (
        "\n\n≤: the smallest budget already reached the target, so the value bounds the "
        "multiplier from above." if eff["upper_bound"].any() else "")


def paper_md(paper: PaperResult, ours: pd.DataFrame) -> str:
    """The paper's finding, its numbers, and whether our ordering (by mean final validation
    loss) agrees with the paper's; with one seed per recipe, only what was measured."""
    loss = dict(zip(ours["label"], ours["loss"]))
    agrees = paper_ordering_agrees(paper, loss)
    ordering = " < ".join(sorted(loss, key=loss.get))
    if ours["verdict"].eq("one seed: no interval").any():
        verdict = (f"ours (final validation loss, one seed): {ordering}; one sample without "
                   "an interval neither agrees nor disagrees with the paper")
    elif agrees is None:
        verdict = ("the paper reports no ordering here (a null result)" if not paper.ordering
                   else "too few common recipes to compare orderings")
    else:
        resolved = ours["verdict"].isin(["better", "worse", "baseline"]).all()
        verdict = (f"ours (by mean final validation loss): {ordering}; it "
                   f"{'agrees' if agrees else 'does not agree'} with the paper"
                   + ("" if resolved else " (not every gap is resolved by our intervals, so "
                      "the ordering is partly noise)"))
    paper_order = " < ".join(paper.ordering) if paper.ordering else "no difference"
    gap = paper.metric in GAP_METRICS
    values = ", ".join(f"`{k}` {v:+g}%" if gap else f"`{k}` {v:g}"
                       for k, v in paper.values.items())
    outcomes = "".join(f"; `{k}`: {v}" for k, v in paper.outcomes.items())
    return (f"## The paper beside this run\n\nPaper ({paper.experiment}, {paper.figure}; "
            f"{paper.scale}): {paper.finding}\n\nPaper's values ({_paper_metric(paper)}): "
            f"{values}"
            f"{outcomes}. Paper's ordering: {paper_order}; {verdict}."
            + (f"\n\nNote{_NOTE_SIGN * gap}: {paper.notes}" if paper.notes else ""))


_NOTE_SIGN = " (the paper's numbers in its own sign, negative = worse)"


def _paper_metric(paper: PaperResult) -> str:
    """The paper's metric as its values read here: a gap names its sign."""
    if paper.metric not in GAP_METRICS:
        return paper.metric
    return (f"{paper.metric} to {paper.baseline or 'the paper reference'}, {GAP_CONVENTION}; "
            "the paper prints the opposite sign")


def layer_type_md(table: pd.DataFrame) -> str:
    """The quantization error of each layer type (Mamba-2, attention and FFN projections)."""
    return ("## Quantization error by layer type\n\nRelative error ||Q(x) - x|| / ||x|| of "
            "each quantized operand (and of the weight gradient, `wgrad`), the mean over "
            "statistics steps, blocks and seeds, by the layer's place in its block "
            "(`tables/layer_type_error.csv`).\n\n" + md_table(table))


def noise_md(noise: pd.DataFrame) -> str:
    """Where each recipe's weight gradient ends relative to the FP4-All-the-Way threshold."""
    last = noise.sort_values("tokens").groupby("label", sort=False).tail(1)
    below = [r.label for r in last.itertuples() if r.min < figures.NOISE_THRESHOLD]
    lines = [f"`{r.label}`: median layer {r.median:.2f}, lowest layer {r.min:.2f}"
             for r in last.itertuples()]
    return ("## Gradient noise\n\nThe weight gradient's norm over the norm of the quantization "
            "noise in it, ||dW|| / ||dW_q - dW||, on the last statistics step: "
            + "; ".join(lines) + ". Chmiel et al. (\"FP4 All the Way\", arXiv 2505.19115) find "
            f"quantized training stops helping below about √3 ≈ {figures.NOISE_THRESHOLD:.2f}: "
            + (f"{', '.join(f'`{b}`' for b in below)} ended with a layer below it."
               if below else "no recipe ended with a layer below it."))


def figures_md(names: list[str], pdf: bool, own: dict[str, str] | None = None) -> str:
    """The figures in order, each with its caption (``own`` where the report wrote one)."""
    captions = {"loss": "Loss vs tokens (mean over seeds, band min-max; shaded: LR decay).",
                "loss_gap": f"Relative loss gap to the baseline over tokens, {GAP_CONVENTION}.",
                "token_efficiency": "Final loss vs training tokens per recipe.",
                "layer_error": "Relative error of the quantized weight gradient by depth.",
                "noise_ratio": "Weight-gradient signal to quantization noise over training, "
                               "with the √3 threshold of Chmiel et al.",
                "paper_vs_ours": "The paper's numbers (left) beside ours (right)."}
    captions |= own or {}
    return "## Figures\n\n" + "\n\n".join(
        f"![{n}](figures/{n}.png)\n\n{captions[n]}"
        + (f" ([PDF](figures/{n}.pdf))" if pdf else "") for n in names)


def markdown(part: str | pd.DataFrame) -> str:
    """A paragraph as it is, a table as ``md_table`` renders it."""
    return part if isinstance(part, str) else md_table(part)


def md_table(df: pd.DataFrame) -> str:
    """``df`` as a markdown table, floats to 4 decimals."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    return "\n".join(lines)


def _cell(v) -> str:
    if isinstance(v, float):
        return fmt(v, 4)
    return str(v).replace("|", "\\|").replace("\n", " ")
