"""A sweep's report: ``report.md``, CSV tables and figures, written next to its runs.

``write_report(paths)`` collects the runs, picks the baseline (the caller's, else the one the
paper compares against, else BF16, else the first recipe), and writes

    report.md                      what was run, the final-loss table with intervals, the
                                   figures, the paper's finding beside ours
    tables/runs.csv                one row per run (collect's ``runs``, less the local
                                   ``path``: ``run`` names it under the report's folder)
    tables/final_loss.csv          per recipe: mean, sd, 95% CI; paired gap to the baseline
    tables/downstream.csv          when runs have eval.json: each task's accuracy per recipe,
                                   paired gap to the baseline, chance (``downstream``)
    tables/loss_gap.csv            the gap curves behind loss_gap.png, with the loss they are of
    tables/token_efficiency.csv    when recipes ran at several token budgets
    tables/layer_type_error.csv    when runs logged statistics: error per layer type
    tables/noise_ratio.csv         ... and gradient noise ratios: the noise_ratio figure's data
    figures/*.png|pdf              loss, loss_gap, token_efficiency, layer_error, noise_ratio,
                                   paper_vs_ours

A sweep's end calls it (``SweepReport``, a Hydra callback); ``nvfp4-lab plot DIR``
regenerates it and ``nvfp4-lab compare A B ...`` writes one for any set of runs. Which sections
a sweep gets is decided here; how each reads, in ``sections``; a scaling study's, in
``scaling_report``; a steps-or-size study's, in ``steps_vs_size_report``, followed, when
``grid`` names the scaling grid's folder, by the law refitted on both (``steps_law_report``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from hydra.experimental.callback import Callback
from matplotlib.figure import Figure
from omegaconf import DictConfig

from ..findings.claims import claim_gaps
from ..findings.context import context_md, shipped
from ..inference.gaps import curve_efficiency_table, efficiency_table
from ..inference.stats import GAP_CONVENTION, recipe_table
from ..laws import scaling_report, steps_law_report, steps_vs_size, steps_vs_size_report
from ..sources.collect import Collection, collect
from ..sources.comparable import caution_md, loss_unit
from ..sources.paper import GAP_METRICS, PaperResult, load_paper
from . import downstream, figures, paper_figures
from .sections import (
    curve_efficiency_md,
    efficiency_md,
    figures_md,
    final_loss_md,
    header,
    layer_type_md,
    markdown,
    md_table,
    models_text,
    noise_md,
    paper_md,
    repeats_md,
    scale_text,
    undated,
)


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


MIN_VAL_POINTS = 4     # validation points a run needs for the gap curves to use them


def gap_metric(curves: pd.DataFrame) -> str:
    """val_loss when every run has at least MIN_VAL_POINTS validation points, else train_loss
    (logged more often; paired seeds see the same batches, so its gap is not batch noise)."""
    counts = curves.dropna(subset=["val_loss"]).groupby("run").size()
    enough = len(counts) == curves["run"].nunique() and (counts >= MIN_VAL_POINTS).all()
    return "val_loss" if enough else "train_loss"


def _gap_caption(metric: str) -> str:
    """The loss-gap figure's caption, naming the loss it shows and why."""
    why = ("" if metric == "val_loss" else f": some run has fewer than {MIN_VAL_POINTS} "
           "validation points, so the curves are of the train loss, logged at every step")
    return (f"The {figures.LOSS_NAMES[metric]} gap to the baseline over tokens, "
            f"(recipe - baseline) / baseline x 100%, {GAP_CONVENTION}{why} "
            "(`tables/loss_gap.csv`, column `metric`).")


@dataclass
class _Draft:
    """A report as it is written: its sections and the names of the figures saved, in order."""

    out: Path
    pdf: bool
    sections: list[str] = field(default_factory=list)
    saved: list[str] = field(default_factory=list)
    captions: dict[str, str] = field(default_factory=dict)    # name -> its own caption

    def figure(self, fig: Figure, name: str, caption: str | None = None) -> None:
        figures.save(fig, self.out / "figures", name, self.pdf)
        self.saved.append(name)
        if caption:
            self.captions[name] = caption

    def table(self, df: pd.DataFrame, name: str) -> None:
        df.to_csv(self.out / "tables" / f"{name}.csv", index=False)


class SweepReport(Callback):
    """Hydra's end of a multirun: the sweep's report. A report that cannot be drawn is said,
    never raised: the runs are what matters, and ``nvfp4-lab plot`` can redraw it."""

    def on_multirun_end(self, config: DictConfig, **kwargs: object) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            print(f"report: {write_report([sweep_dir])}")
        except Exception as err:  # noqa: BLE001 - any drawing error must not fail the sweep
            print(f"no report for {sweep_dir} ({type(err).__name__}: {err}); "
                  f"retry with: nvfp4-lab plot {sweep_dir}")


def write_report(paths: list[str | Path], out: Path | None = None, *,
                 baseline: str | None = None, ablation: str | None = None,
                 pdf: bool = True, grid: Path | None = None) -> Path:
    """Collect the runs under ``paths`` and write the report into ``out`` (default: the
    common directory of the runs); ``pdf``: each figure as PDF too, besides the PNG; ``grid``:
    the scaling grid's folder, which a steps-or-size study's law is refitted with. Returns
    the path of ``report.md``."""
    coll = collect(paths)
    out = Path(out or coll.root)
    if coll.runs.empty:
        raise ValueError(f"no finished or running runs under {', '.join(map(str, paths))}"
                         + _skipped_text(coll))
    unit = loss_unit(coll.runs)      # runs whose losses share no unit: refused, nothing written
    ablation = ablation or _ablation_name(coll)
    paper = load_paper(ablation) if ablation else None
    if steps_vs_size.is_study(coll.runs):
        parts = steps_vs_size_report.section(coll.runs, out,
                                             len(scaling_report.grid(coll.root)) or None)
        if grid is not None:
            parts += steps_law_report.section(collect([grid]).runs, coll.runs)
        return _write(out, [header(coll, ablation, None, "bf16", paths, recipes=False),
                            *map(markdown, parts)], coll)
    if scaling_report.is_study(coll.runs):
        parts = scaling_report.section(coll.runs, out, coll.root)
        return _write(out, [header(coll, ablation, None, "bf16", paths, recipes=False),
                            *map(markdown, parts)], coll)
    base = choose_baseline(coll.labels, baseline, paper)
    colours = figures.palette(coll.labels)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    draft = _Draft(out, pdf)
    draft.table(coll.runs.drop(columns="path"), "runs")
    table = recipe_table(coll.runs, "final_val_loss", base)
    draft.table(table, "final_loss")
    draft.sections += [header(coll, ablation, paper, base, paths), caution_md(coll.runs),
                       final_loss_md(table, base, unit) + repeats_md(coll.runs)]
    _downstream(draft, coll, base)
    _curves(draft, coll, colours, base)
    if not coll.layers.empty:
        _layers(draft, coll.layers, colours, coll.axes)
    if paper is not None:
        _paper(draft, coll, paper, colours, base)
    draft.sections.append(figures_md(draft.saved, pdf, draft.captions))
    return _write(out, draft.sections, coll)


def _downstream(draft: _Draft, coll: Collection, base: str) -> None:
    """Each lm-eval task's accuracy per recipe, when runs have an ``eval.json``."""
    scores = downstream.scores_table(coll.runs)
    if not scores.empty:
        table = downstream.downstream_table(scores, base)
        draft.table(table, "downstream")
        draft.sections.append(downstream.downstream_md(table, base))


def _curves(draft: _Draft, coll: Collection, colours: dict[str, str], base: str) -> None:
    """The loss curves, the gap to ``base`` over tokens, and the tokens each recipe needs."""
    draft.figure(figures.loss_figure(coll.runs, coll.curves, coll.axes, colours), "loss")
    metric = gap_metric(coll.curves)
    if len(coll.labels) > 1:
        fig, gaps = figures.gap_figure(coll.runs, coll.curves, coll.axes, colours, base, metric)
        draft.figure(fig, "loss_gap", _gap_caption(metric))
        draft.table(gaps.assign(metric=metric), "loss_gap")
    eff = _efficiency(coll, base)
    if eff is not None:
        draft.table(eff, "token_efficiency")
        draft.figure(figures.efficiency_figure(coll.runs, base, eff), "token_efficiency")
        draft.sections.append(efficiency_md(eff, base))
    elif len(coll.labels) > 1 and metric == "val_loss":
        approx = curve_efficiency_table(coll.runs, coll.curves, base)
        draft.table(approx, "token_efficiency_curves")
        draft.sections.append(curve_efficiency_md(approx, base))


def _layers(draft: _Draft, layers: pd.DataFrame, colours: dict[str, str],
            axes: list[str]) -> None:
    """What the runs' layer statistics show: error by depth and by layer type, gradient noise."""
    if (layers["metric"] == "wgrad/rel_err").any():
        draft.figure(figures.layer_error_figure(layers, colours, axes), "layer_error")
    by_type = figures.layer_type_table(layers)
    if not by_type.empty:
        draft.table(by_type, "layer_type_error")
        draft.sections.append(layer_type_md(by_type))
    noise = figures.noise_table(layers)
    if not noise.empty:
        draft.table(noise, "noise_ratio")
        draft.figure(figures.noise_figure(noise, colours, axes), "noise_ratio")
        draft.sections.append(noise_md(noise))


def _paper(draft: _Draft, coll: Collection, paper: PaperResult, colours: dict[str, str],
           base: str) -> None:
    """The paper's numbers beside ours, where both are gaps to the same arm, and the
    published intervals this sweep's gaps are read against."""
    want = paper.baseline or paper.reference
    if paper.metric in GAP_METRICS and base != want:
        draft.sections.append(f"## Paper vs ours\n\nNot drawn: the paper's gaps are against "
                              f"`{want}` and ours here against `{base}`, which one axis would "
                              f"show as one quantity. Add `{want}` runs (or `--baseline "
                              f"{want}`) to compare them.")
    else:
        ours = _ours_in_paper_units(coll, paper, base)
        title = f"this run: {scale_text(coll.runs)}"
        draft.figure(paper_figures.paper_figure(paper, ours, colours, title, base,
                                                loss_unit(coll.runs)), "paper_vs_ours")
        draft.sections.append(paper_md(paper, ours))
    beside = context_md(paper, _claim_gaps(coll, paper), shipped(), models_text(coll.runs))
    if beside:
        draft.sections.append(beside)


def _write(out: Path, sections: list[str], coll: Collection) -> Path:
    if len(coll.skipped):
        sections.append("## Skipped runs\n\n" + md_table(coll.skipped))
    path, text = out / "report.md", "\n\n".join(s for s in sections if s) + "\n"
    if not (path.exists() and undated(path.read_text()) == undated(text)):
        path.write_text(text)     # one that says nothing new keeps its file, and its date
    return path


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
    """claim -> this sweep's mean claim gap (``claims.claim_gaps``)."""
    return {str(claim): float(claim_gaps(coll.runs, claim, "final_val_loss")["gap"].mean())
            for claim in paper.claims if {claim.better, claim.worse} <= set(coll.labels)}


def _ours_in_paper_units(coll: Collection, paper: PaperResult, base: str) -> pd.DataFrame:
    """Our final validation loss per label in the form of the paper's metric (a gap in % to
    ``base``, or the loss itself): label, value, lo, hi, loss (the mean final validation
    loss), verdict (of the gap to ``base``). A gap's interval is its own, the one its verdict
    uses. Validation loss whatever the paper plotted: the
    report's table and the results index use it too, and it is the less noisy of the two."""
    t = recipe_table(coll.runs, "final_val_loss", base).rename(columns={"mean": "loss"})
    if paper.metric in GAP_METRICS:
        t = t.assign(value=t["gap_pct"], lo=t["gap_lo"], hi=t["gap_hi"])
        t.loc[t["label"] == base, "value"] = 0.0
    else:
        t = t.assign(value=t["loss"], lo=t["ci_lo"], hi=t["ci_hi"])
    return t[["label", "value", "lo", "hi", "loss", "verdict"]]


def _skipped_text(coll: Collection) -> str:
    return "" if coll.skipped.empty else "; skipped: " + "; ".join(
        f"{r.run} ({r.status}: {r.reason})" for r in coll.skipped.itertuples())
