"""A sweep's report: ``report.md``, CSV tables and figures, written next to its runs.

``write_report(paths)`` collects the runs, picks the baseline (the caller's, else the one the
paper compares against, else BF16, else the first recipe), and writes

    report.md                      what was run, the final-loss table with intervals, the
                                   figures, the paper's finding beside ours
    tables/runs.csv                one row per run (collect's ``runs``)
    tables/final_loss.csv          per recipe: mean, sd, 95% CI; paired gap to the baseline
    tables/loss_gap.csv            the gap curves behind loss_gap.png
    tables/token_efficiency.csv    when recipes ran at several token budgets
    tables/layer_type_error.csv    when runs logged statistics: error per layer type
    tables/noise_ratio.csv         ... and gradient noise ratios: the noise_ratio figure's data
    figures/*.png|pdf              loss, loss_gap, token_efficiency, layer_error, noise_ratio,
                                   paper_vs_ours

The sweep callback (``train/sweep.py``) calls it when a sweep ends; ``nvfp4-lab plot DIR``
regenerates it and ``nvfp4-lab compare A B ...`` writes one for any set of runs.
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd

from . import figures, scaling_report
from . import verdicts as v
from .collect import Collection, collect, loss_unit
from .context import context_md, shipped
from .gaps import curve_efficiency_table, efficiency_table
from .paper import PaperResult, load_paper, paper_ordering_agrees
from .stats import paired_gaps, recipe_table


def choose_baseline(labels: list[str], requested: str | None,
                    paper: PaperResult | None) -> str:
    """The caller's baseline (must exist), else the paper's reference arm, else bf16, else the
    first recipe."""
    if requested is not None:
        if requested not in labels:
            raise ValueError(f"baseline {requested!r} is not among the recipes: "
                             f"{', '.join(labels)}")
        return requested
    for candidate in (paper and paper.reference, paper and paper.baseline, "bf16"):
        if candidate in labels:
            return candidate
    return labels[0]


def gap_metric(curves: pd.DataFrame) -> str:
    """val_loss when every run has at least 4 validation points, else train_loss (logged
    more often; paired seeds see the same batches, so its gap is not batch noise)."""
    counts = curves.dropna(subset=["val_loss"]).groupby("run").size()
    enough = len(counts) == curves["run"].nunique() and (counts >= 4).all()
    return "val_loss" if enough else "train_loss"


def write_report(paths: list[str | Path], out: Path | None = None, *,
                 baseline: str | None = None, ablation: str | None = None,
                 pdf: bool = True) -> Path:
    """Collect the runs under ``paths`` and write the report into ``out`` (default: the
    common directory of the runs); ``pdf``: each figure as PDF too, besides the PNG. Returns
    the path of ``report.md``."""
    coll = collect(paths)
    out = Path(out or coll.root)
    if coll.runs.empty:
        raise ValueError(f"no finished or running runs under {', '.join(map(str, paths))}"
                         + _skipped_text(coll))
    ablation = ablation or _ablation_name(coll)
    paper = load_paper(ablation) if ablation else None
    if scaling_report.is_study(coll.runs):
        parts = scaling_report.section(coll.runs, out, coll.root)
        return _write(out, [_header(coll, ablation, None, "bf16", out, recipes=False),
                            *map(markdown, parts)], coll)
    base = choose_baseline(coll.labels, baseline, paper)
    colours = figures.palette(coll.labels)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    coll.runs.to_csv(out / "tables" / "runs.csv", index=False)

    table = recipe_table(coll.runs, "final_val_loss", base)
    table.to_csv(out / "tables" / "final_loss.csv", index=False)
    sections = [_header(coll, ablation, paper, base, out),
                _table_md(table, base, loss_unit(coll.runs)) + _repeats_md(coll.runs)]

    figs = out / "figures"
    figures.save(figures.loss_figure(coll.runs, coll.curves, coll.axes, colours), figs, "loss",
                 pdf)
    names = ["loss"]
    metric = gap_metric(coll.curves)
    if len(coll.labels) > 1:
        fig, gaps = figures.gap_figure(coll.runs, coll.curves, coll.axes, colours, base, metric)
        figures.save(fig, figs, "loss_gap", pdf)
        gaps.to_csv(out / "tables" / "loss_gap.csv", index=False)
        names.append("loss_gap")
    eff = _efficiency(coll, base)
    if eff is not None:
        eff.to_csv(out / "tables" / "token_efficiency.csv", index=False)
        figures.save(figures.efficiency_figure(coll.runs, base, eff), figs,
                     "token_efficiency", pdf)
        names.append("token_efficiency")
        sections.append(_efficiency_md(eff, base))
    elif len(coll.labels) > 1 and metric == "val_loss":
        approx = curve_efficiency_table(coll.runs, coll.curves, base)
        approx.to_csv(out / "tables" / "token_efficiency_curves.csv", index=False)
        sections.append(_curve_efficiency_md(approx, base))
    if not coll.layers.empty:
        if (coll.layers["metric"] == "wgrad/rel_err").any():
            figures.save(figures.layer_error_figure(coll.layers, colours, coll.axes), figs,
                         "layer_error", pdf)
            names.append("layer_error")
        by_type = figures.layer_type_table(coll.layers)
        if not by_type.empty:
            by_type.to_csv(out / "tables" / "layer_type_error.csv", index=False)
            sections.append(_layer_type_md(by_type))
        noise = figures.noise_table(coll.layers)
        if not noise.empty:
            noise.to_csv(out / "tables" / "noise_ratio.csv", index=False)
            figures.save(figures.noise_figure(noise, colours, coll.axes),
                         figs, "noise_ratio", pdf)
            names.append("noise_ratio")
            sections.append(_noise_md(noise))
    if paper is not None:
        want = paper.baseline or paper.reference
        if paper.metric.endswith("gap_pct") and base != want:
            sections.append(f"## Paper vs ours\n\nNot drawn: the paper's gaps are against "
                            f"`{want}` and ours here against `{base}`, which one axis would "
                            f"show as one quantity. Add `{want}` runs (or `--baseline {want}`)"
                            " to compare them.")
        else:
            ours = _ours_in_paper_units(coll, paper, base)
            title = f"this run: {scale_text(coll.runs)}"
            figures.save(figures.paper_figure(paper, ours, colours, title, base,
                                              loss_unit(coll.runs)), figs,
                         "paper_vs_ours", pdf)
            names.append("paper_vs_ours")
            sections.append(_paper_md(paper, ours))
        beside = context_md(paper, _claim_gaps(coll, paper), shipped(), models_text(coll.runs))
        if beside:
            sections.append(beside)
    sections.append(_figures_md(names, pdf))
    return _write(out, sections, coll)


def _write(out: Path, sections: list[str], coll: Collection) -> Path:
    if len(coll.skipped):
        sections.append("## Skipped runs\n\n" + md_table(coll.skipped))
    (out / "report.md").write_text("\n\n".join(sections) + "\n")
    return out / "report.md"


def _ablation_name(coll: Collection) -> str | None:
    """The config's ``name`` (the ablation's) when all runs share one."""
    names = coll.runs["name"].dropna().unique()
    return str(names[0]) if len(names) == 1 else None


def _efficiency(coll: Collection, reference: str) -> pd.DataFrame | None:
    """The token-efficiency table when some recipe ran at more than one token budget."""
    done = coll.runs[coll.runs["status"] == "done"]
    budgets = done.groupby("recipe")["tokens"].nunique()
    if budgets.empty or budgets.max() < 2:
        return None
    return efficiency_table(done, reference)


def _claim_gaps(coll: Collection, paper: PaperResult) -> dict[str, float]:
    """claim -> this sweep's mean paired gap of its worse label against its better one."""
    out = {}
    for claim in paper.claims:
        if {claim.better, claim.worse} <= set(coll.labels):
            gaps = paired_gaps(coll.runs, claim.better, "final_val_loss")
            out[str(claim)] = float(gaps.loc[gaps["label"] == claim.worse, "gap_pct"].mean())
    return out


def _ours_in_paper_units(coll: Collection, paper: PaperResult, base: str) -> pd.DataFrame:
    """Our final validation loss per label in the form of the paper's metric (a gap in % to
    ``base``, or the loss itself): label, value, lo, hi, loss (the mean final validation
    loss), verdict (of the gap to ``base``). Validation loss whatever the paper plotted: the
    report's table and the results index use it too, and it is the less noisy of the two."""
    t = recipe_table(coll.runs, "final_val_loss", base).rename(columns={"mean": "loss"})
    if paper.metric.endswith("gap_pct"):
        t = t.rename(columns={"gap_pct": "value", "gap_lo": "lo", "gap_hi": "hi"})
        t.loc[t["label"] == base, "value"] = 0.0
    else:
        t = t.assign(value=t["loss"], lo=t["ci_lo"], hi=t["ci_hi"])
    return t[["label", "value", "lo", "hi", "loss", "verdict"]]


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


def _header(coll: Collection, ablation, paper, base: str, out: Path,
            recipes: bool = True) -> str:
    status = coll.runs["status"].value_counts()
    lines = [f"# {ablation or 'comparison'}" + (f": paper {paper.experiment}, {paper.figure}"
                                                 if paper else ""),
             "",
             f"Generated {dt.datetime.now():%Y-%m-%d %H:%M} from `{out}`: "
             f"{status.get('done', 0)} runs done, {status.get('running', 0)} still running, "
             f"{len(coll.skipped)} skipped (failed, diverged or unreadable).",
             "",
             f"Recipes, by `{figures.axis_title(coll.axes)}`: "
             + ", ".join(f"`{lb}`" for lb in coll.labels) + f"; baseline `{base}`. "
             f"Scale: {scale_text(coll.runs)}."]
    return "\n".join(lines if recipes else lines[:-2])


def _fmt(x, digits=4) -> str:
    return "" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{digits}f}"


def _table_md(table: pd.DataFrame, base: str, unit: str) -> str:
    rows = []
    for r in table.itertuples():
        ci = f"[{_fmt(r.ci_lo)}, {_fmt(r.ci_hi)}]" if np.isfinite(r.ci_lo) else ""
        gap = "" if r.label == base else _fmt(r.gap_pct, 2)
        gci = f"[{_fmt(r.gap_lo, 2)}, {_fmt(r.gap_hi, 2)}]" if np.isfinite(r.gap_lo) else ""
        pci = (f"[{_fmt(r.pooled_lo, 2)}, {_fmt(r.pooled_hi, 2)}]"
               if np.isfinite(r.pooled_lo) else "")
        seeds = v.seeds_text(None if pd.isna(r.seeds_80) else int(r.seeds_80))
        rows.append(f"| `{r.label}` | {r.n} | {_fmt(r.mean)} | {_fmt(r.sd)} | {ci} | {gap} | "
                    f"{gci} | {pci} | {r.verdict} | {seeds} |")
    checks = table.dropna(subset=["bartlett_p"]).drop_duplicates("bartlett_p")
    pooled = ("" if checks.empty else " Bartlett's check of equal spreads across the recipes' "
              "gaps: " + ", ".join(f"p = {p:.3f}" for p in checks["bartlett_p"])
              + " (pooled where p >= 0.05, and then the verdict uses the pooled interval).")
    return (f"## Final validation loss ({unit})\n\n"
            f"Gap = (baseline - recipe) / baseline x 100%, per seed against `{base}` of the "
            "same seed (paired), then averaged; negative = worse than the baseline. A verdict "
            "is given only when the 95% interval excludes zero. Pooled: the recipes' gaps "
            "share one spread (against BF16, or between quantized recipes); seeds for 80%: "
            "the paired seeds a two-sided 5% test needs at this gap (analysis/verdicts.py)."
            + pooled + "\n\n"
            "| recipe | seeds | mean | sd | 95% CI | gap (%) | gap 95% CI | pooled 95% CI | "
            "verdict | seeds for 80% |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows))


def _repeats_md(runs: pd.DataFrame) -> str:
    """A note naming the seeds run more than once (averaged: a repeat is not a new sample)."""
    done = runs[runs["status"] == "done"]
    counts = done.groupby(["label", "seed"], sort=False).size()
    repeats = [f"`{label}` seed {seed} x{n}" for (label, seed), n in counts.items() if n > 1]
    return ("" if not repeats else "\n\nSeeds run more than once, averaged into one sample "
            "each (a repeat of a seed is not an independent sample): " + ", ".join(repeats)
            + ".")


def _efficiency_md(eff: pd.DataFrame, reference: str) -> str:
    return (f"## Token efficiency\n\nTokens each recipe needs to reach `{reference}`'s final "
            "validation loss, as a multiple of its tokens, interpolated linearly between the "
            "budgets that were run (per seed, then averaged).\n\n"
            + _multiplier_md(eff.rename(columns={"recipe": "label"}), reference))


def _curve_efficiency_md(approx: pd.DataFrame, reference: str) -> str:
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


def _paper_md(paper: PaperResult, ours: pd.DataFrame) -> str:
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
    gap = paper.metric.endswith("pct")
    values = ", ".join(f"`{k}` {v:+g}%" if gap else f"`{k}` {v:g}"
                       for k, v in paper.values.items())
    outcomes = "".join(f"; `{k}`: {v}" for k, v in paper.outcomes.items())
    return (f"## The paper beside this run\n\nPaper ({paper.experiment}, {paper.figure}; "
            f"{paper.scale}): {paper.finding}\n\nPaper's values ({paper.metric}): {values}"
            f"{outcomes}. Paper's ordering: {paper_order}; {verdict}."
            + (f"\n\nNote: {paper.notes}" if paper.notes else ""))


def _layer_type_md(table: pd.DataFrame) -> str:
    """The quantization error of each layer type (Mamba-2, attention and FFN projections)."""
    return ("## Quantization error by layer type\n\nRelative error ||Q(x) - x|| / ||x|| of "
            "each quantized operand (and of the weight gradient, `wgrad`), the mean over "
            "statistics steps, blocks and seeds, by the layer's place in its block "
            "(`tables/layer_type_error.csv`).\n\n" + md_table(table))


def _noise_md(noise: pd.DataFrame) -> str:
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


def _figures_md(names: list[str], pdf: bool) -> str:
    captions = {"loss": "Loss vs tokens (mean over seeds, band min-max; shaded: LR decay).",
                "loss_gap": "Relative loss difference vs the baseline over tokens.",
                "token_efficiency": "Final loss vs training tokens per recipe.",
                "layer_error": "Relative error of the quantized weight gradient by depth.",
                "noise_ratio": "Weight-gradient signal to quantization noise over training, "
                               "with the √3 threshold of Chmiel et al.",
                "paper_vs_ours": "The paper's numbers (left) beside ours (right)."}
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
        return _fmt(v, 4)
    return str(v).replace("|", "\\|").replace("\n", " ")


def _skipped_text(coll: Collection) -> str:
    return "" if coll.skipped.empty else "; skipped: " + "; ".join(
        f"{r.run} ({r.status}: {r.reason})" for r in coll.skipped.itertuples())
