"""The report of a steps-or-size study (``+ablation=steps_vs_size``): the cells with each
reading's pre-registered prediction beside them, the steps exponent c and the reading the plan's
rule gives (``steps_vs_size``), the secondary analyses, and a figure of the gap against steps.
Tables go to ``tables/steps_vs_size_*.csv``, the figure to ``figures/steps_vs_size.png``.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ...sweepdir import SweepDir
from ..inference.stats import FLOAT_FORMAT, mean_ci
from . import steps_vs_size as svs
from .scaling import inflated

PLANNED_SEEDS = 8          # the plan's seeds; its reading waits for them (6 if type is lost)
# the plan's anchors: the scaling grid's w64 cell at D/N 20 (N, steps at 2048 a step, gap)
N_REF, S_REF, G_REF = 185_024, 1807, 0.0317
READINGS = ("size", "steps", "batch noise")
Part = str | pd.DataFrame


def predicted(reading: str, params: float, steps: float, ref_steps: float) -> float:
    """The relative gap the plan wrote down for ``reading`` at N = ``params`` and S =
    ``steps`` (``ref_steps``: that size's steps at 2048 tokens a step)."""
    size = G_REF * (params / N_REF) ** svs.B_LAW
    return {"size": size,
            "steps": G_REF * (steps / S_REF) ** svs.B_LAW,
            "batch noise": size * (0.5 + 0.5 * steps / ref_steps)}[reading]


def cell_table(gaps: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: size, params, tokens_per_step, steps, n, the mean relative gap with
    its Student-t interval, the mean losses of both arms, and each reading's prediction."""
    rows = []
    for (params, size, steps), cell in gaps.groupby(["params", "size", "steps"], sort=True):
        ci = mean_ci(cell["rel_gap"], svs.LEVEL)
        ref = svs.ref_steps(gaps[gaps["size"] == size])
        rows.append({"size": size, "params": int(params),
                     "tokens_per_step": int(cell["tokens_per_step"].iloc[0]),
                     "steps": int(steps), "n": len(cell), "rel_gap": ci.mean,
                     "lo": ci.lo, "hi": ci.hi, "loss_bf16": cell["loss_against"].mean(),
                     "loss_nvfp4": cell["loss"].mean(),
                     **{f"if_{r}": predicted(r, params, steps, ref) for r in READINGS}})
    return pd.DataFrame(rows)


def whole_seeds(gaps: pd.DataFrame) -> list[int]:
    """The seeds paired in every cell."""
    cells = gaps.groupby(["size", "steps"]).ngroups
    per_seed = gaps.groupby("seed").size()
    return sorted(int(s) for s in per_seed[per_seed == cells].index)


def matched(gaps: pd.DataFrame, seed: int = svs.SEED,
            resamples: int = svs.RESAMPLES) -> pd.DataFrame:
    """Where two sizes' step counts meet (within 2%): the ratio of the smaller model's mean
    relative gap to the larger's, with a percentile interval over seed resamples. The size
    reading predicts (N_large / N_small)^-B_LAW, the steps reading 1."""
    table, rng, rows = cell_table(gaps), np.random.default_rng(seed), []
    for small in table.itertuples():
        for large in table[table["params"] > small.params].itertuples():
            if abs(large.steps / small.steps - 1) > 0.02:
                continue
            draws = [inflated(_gaps_of(gaps, c))[rng.integers(0, c.n, (resamples, c.n))]
                     for c in (small, large)]
            ratio = draws[0].mean(1) / draws[1].mean(1)
            lo, hi = svs.interval(ratio)
            rows.append({"small": small.size, "large": large.size, "steps_small": small.steps,
                         "steps_large": large.steps, "ratio": small.rel_gap / large.rel_gap,
                         "lo": lo, "hi": hi, "if_size": (large.params / small.params)
                         ** -svs.B_LAW, "if_steps": 1.0})
    return pd.DataFrame(rows)


def _gaps_of(gaps: pd.DataFrame, cell) -> np.ndarray:
    rows = (gaps["size"] == cell.size) & (gaps["steps"] == cell.steps)
    return gaps.loc[rows, "rel_gap"].to_numpy(float)


def fit_table(gaps: pd.DataFrame, **kw) -> pd.DataFrame:
    """c with its interval, Monte-Carlo errors and reading: the primary fit (relative gap,
    both sizes), then each size alone, then the absolute gap."""
    rows = [("relative", "all", svs.Cells.of(gaps, "relative"))]
    rows += [("relative", size, svs.Cells.of(gaps[gaps["size"] == size], "relative"))
             for size in gaps["size"].unique()]
    rows.append(("absolute", "all", svs.Cells.of(gaps, "absolute")))
    out = []
    for form, sizes, cells in rows:
        e = svs.exponent(cells, **kw)
        out.append({"form": form, "sizes": sizes, "c": e.c, "lo": e.lo, "hi": e.hi,
                    "mc_lo": e.mc_lo, "mc_hi": e.mc_hi, "reading": e.reading})
    return pd.DataFrame(out)


def figure(gaps: pd.DataFrame, table: pd.DataFrame) -> plt.Figure:
    """The relative gap (%) against steps, one colour per size: each seed a ring (gid
    "seeds"), the cell means with their t intervals, each reading's prediction a line (gid
    "if_<reading>")."""
    fig, ax = plt.subplots(figsize=(7.5, 4))
    styles = {"size": ":", "steps": "--", "batch noise": "-."}
    for size, cells in table.groupby("size", sort=False):
        seeds = gaps[gaps["size"] == size]
        bars = ax.errorbar(cells["steps"], 100 * cells["rel_gap"],
                           100 * np.vstack([cells["rel_gap"] - cells["lo"],
                                            cells["hi"] - cells["rel_gap"]]),
                           marker="o", capsize=2, ls="none", label=f"{size}: mean, 95% t")
        colour = bars.lines[0].get_color()
        ax.plot(seeds["steps"], 100 * seeds["rel_gap"], ls="none", marker="o", ms=4,
                mfc="none", mew=0.8, color=colour, gid="seeds")
        for r in READINGS:
            ax.plot(cells["steps"], 100 * cells[f"if_{r}"], ls=styles[r], lw=1, color=colour,
                    gid=f"if_{r}", label=f"{size}: if {r}")
    ax.axhline(0.0, color="0.6", lw=0.8)
    ax.set_xscale("log")
    ticks = _ticks(sorted(table["steps"].unique()))
    ax.set_xticks(list(ticks), list(ticks.values()))
    ax.minorticks_off()
    ax.set_xlabel("optimizer steps (the same tokens per size; tokens a step 512-8192)")
    ax.set_ylabel("(L_NVFP4 - L_BF16) / L_BF16, %\n(positive = NVFP4 worse)")
    ax.set_title("NVFP4's gap to BF16 against steps at fixed size and D/N", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def _ticks(steps: list[int]) -> dict[int, str]:
    """One tick per run of step counts within 2% of each other (the sizes' meeting points),
    labelled with all of them: "452/454"."""
    out: dict[int, str] = {}
    first = None
    for s in steps:
        if first is not None and s <= first * 1.02:
            out[first] += f"/{s:,}"
        else:
            first, out[s] = s, f"{s:,}"
    return out


def section(runs: pd.DataFrame, out: Path, jobs: int | None) -> list[Part]:
    """The report's steps-or-size section on ``runs`` (collect's table; ``jobs``: the sweep's
    job count when its ``multirun.yaml`` says it); writes its tables and figure under
    ``out``."""
    gaps = svs.paired_gaps(runs)
    seeds = whole_seeds(gaps)
    done = int((runs["status"] == "done").sum())
    parts: list[Part] = ["## Steps or size: the gap against steps at fixed size and D/N",
                         _state(runs, done, jobs, seeds)]
    if gaps.empty or gaps.groupby(["size", "steps"]).ngroups < 2:
        return parts + ["No two cells have paired runs yet."]
    table = cell_table(gaps)
    for d in ("tables", "figures"):
        (out / d).mkdir(parents=True, exist_ok=True)
    gaps.to_csv(out / "tables" / "steps_vs_size_seeds.csv", index=False)
    table.to_csv(out / "tables" / "steps_vs_size_cells.csv", index=False)
    fig = figure(gaps, table)
    fig.savefig(out / "figures" / "steps_vs_size.png", dpi=150)
    plt.close(fig)
    parts += [_cells_md(table), "![the gap against steps](figures/steps_vs_size.png)"]
    if min(len(seeds), table["n"].min()) < 2:
        return parts + ["The exponent waits for two seeds in every cell."]
    fits = fit_table(gaps)
    fits.to_csv(out / "tables" / "steps_vs_size_fit.csv", index=False,
                float_format=FLOAT_FORMAT)
    both = matched(gaps)
    both.to_csv(out / "tables" / "steps_vs_size_matched.csv", index=False,
                float_format=FLOAT_FORMAT)
    return parts + [_fit_md(fits), _verdict(fits.iloc[0], len(seeds)),
                    *([_matched_md(both)] if len(both) else [])]


def _state(runs: pd.DataFrame, done: int, jobs: int | None, seeds: list[int]) -> str:
    done_runs = runs[runs["status"] == "done"]
    machine = done_runs["machine_class"].fillna(done_runs["device"]).fillna("unknown")
    machines = "; ".join(f"{m} ({n} runs)" for m, n in machine.value_counts().items())
    of = f" of the study's {jobs}" if jobs else ""
    whole = f"{len(seeds)} whole seed{'s' * (len(seeds) != 1)}"
    return (f"{done} runs finished{of}; {whole} (paired in every cell) of "
            f"the plan's {PLANNED_SEEDS}. On {machines or 'no machine yet'}. Gap = "
            f"(L_NVFP4 - L_BF16) / L_BF16 of the final validation loss, per seed; positive "
            f"= NVFP4 worse. The predictions are the plan's, written before any run "
            f"(results/preregistration.md, Steps or size).")


def _pct(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{100 * x:+.2f}"


def _cells_md(t: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "size": t["size"], "tokens a step": t["tokens_per_step"].map("{:,}".format),
        "steps": t["steps"].map("{:,}".format), "pairs": t["n"],
        "gap, % (positive = worse) [95% t]": [f"{_pct(r.rel_gap)} [{_pct(r.lo)}, {_pct(r.hi)}]"
                                               for r in t.itertuples()],
        "if size, %": t["if_size"].map(_pct), "if steps, %": t["if_steps"].map(_pct),
        "if batch noise, %": t["if_batch noise"].map(_pct),
        "BF16 loss": t["loss_bf16"].map("{:.4f}".format)})


def _fit_md(f: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "gap": f["form"], "sizes": f["sizes"], "c": f["c"].map("{:+.3f}".format),
        "95% interval": [f"[{r.lo:+.3f}, {r.hi:+.3f}]" for r in f.itertuples()],
        "Monte-Carlo sd of the bounds": [f"{r.mc_lo:.3f}, {r.mc_hi:.3f}" for r in f.itertuples()],
        "the plan's rule reads": f["reading"]})


def _verdict(primary: pd.Series, seeds: int) -> str:
    rule = (f"The steps exponent c (gap = k_size (S / S_2048)^c; size predicts 0, steps "
            f"{svs.B_LAW}, batch noise > 0) is {primary['c']:+.3f} [{primary['lo']:+.3f}, "
            f"{primary['hi']:+.3f}]: the plan's rule reads **{primary['reading']}**")
    if seeds >= PLANNED_SEEDS:
        return rule + f", on all {seeds} seeds. This is the study's reading."
    return (rule + f" on {seeds} whole seeds. Interim: the plan reads the study at "
            f"{PLANNED_SEEDS} seeds (from 6 only if this machine type is lost).")


def _matched_md(m: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "where the steps meet": [f"{r.small} at {r.steps_small:,} vs {r.large} at "
                                 f"{r.steps_large:,} steps" for r in m.itertuples()],
        "gap ratio, smaller / larger model [95%]": [f"{r.ratio:.2f} [{r.lo:.2f}, {r.hi:.2f}]"
                                                   for r in m.itertuples()],
        "if size": m["if_size"].map("{:.2f}".format), "if steps": "1.00"})


def index_md(folder: Path, link: str) -> list[Part]:
    """The results index's section on the published study in ``folder`` (linked as
    ``link``): how many of its planned runs are in, and the exponent its report fitted."""
    sweep = SweepDir.read(folder)
    runs, jobs = len(sweep.runs()), len(sweep.jobs())
    parts: list[Part] = [
        "## Steps or size as published (results/preregistration.md, Steps or size)",
        f"[{link}]({link}/report.md): {runs} of the study's {jobs} planned runs published; "
        "the rest are pending, never estimated."]
    fit = folder / "tables" / "steps_vs_size_fit.csv"
    if not fit.exists():
        return parts + ["No exponent fitted yet: it waits for two seeds in every cell, and the "
                        f"plan reads the study at {PLANNED_SEEDS} seeds."]
    return parts + [_fit_md(pd.read_csv(fit, keep_default_na=False))]
