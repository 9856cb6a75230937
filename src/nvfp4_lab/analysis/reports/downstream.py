"""The report's downstream section: each lm-eval task's accuracy per recipe, from the runs'
``eval.json`` (``nvfp4-lab eval``), with paired gaps to the baseline as the loss table has.

Accuracy is a score (higher is better), so the gap is taken on the error rate 1 - accuracy
through the same paired machinery as the losses (``stats.recipe_table``): per seed against the
baseline of that seed, (error - baseline error) / baseline error x 100%, averaged with its own
t interval; positive = worse, as every gap the lab writes.

Chance: a recipe's accuracy is above chance when its mean over seeds exceeds the task's
guessing rate (``TaskScore.chance``: the mean of 1 / choices) by more than ``Z`` of its runs'
mean standard error (lm-eval's, over documents). A task on which no recipe is above chance
says nothing about the recipes, and the section says so: at lab scale (the 0.74M-parameter
``nano``) downstream accuracy sits at chance; the table is for the GPU scale.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...downstream import Evaluations, Forward
from ..inference.stats import GAP_CONVENTION, recipe_table
from .sections import fmt, signed

Z = 1.96


def scores_table(runs: pd.DataFrame, forward: Forward = Forward.quantized) -> pd.DataFrame:
    """One row per (run, task) scored with ``forward``: label, seed, status, task, acc,
    acc_stderr, chance (collect's runs table in; empty when no run has scores)."""
    rows = [{"label": r.label, "seed": r.seed, "status": r.status, "task": task,
             "acc": s.acc, "acc_stderr": s.acc_stderr, "chance": s.chance}
            for r in runs.itertuples()
            for task, s in Evaluations.read(Path(r.path)).of(forward).items()]
    return pd.DataFrame(rows)


def downstream_table(scores: pd.DataFrame, base: str) -> pd.DataFrame:
    """Per task and recipe: seeds (n), acc (mean), acc_lo, acc_hi (95% t interval), chance,
    above_chance, and the paired error-rate gap to ``base`` (gap_pct, gap_lo, gap_hi,
    verdict) where ``base`` was scored on the task."""
    parts = []
    for task, part in scores.groupby("task", sort=False):
        part = part.assign(error=1 - part["acc"])
        t = recipe_table(part, "error", base if base in set(part["label"]) else None)
        by = part.groupby("label", sort=False)
        t = t.assign(task=task, acc=1 - t["mean"], acc_lo=1 - t["ci_hi"],
                     acc_hi=1 - t["ci_lo"], chance=t["label"].map(by["chance"].mean()),
                     stderr=t["label"].map(by["acc_stderr"].mean()))
        above = t["acc"] - Z * t["stderr"] > t["chance"]
        t["above_chance"] = above.astype(object).where(t["chance"].notna())
        parts.append(t)
    cols = ["task", "label", "n", "acc", "acc_lo", "acc_hi", "chance", "above_chance",
            "gap_pct", "gap_lo", "gap_hi", "verdict"]
    return pd.concat(parts, ignore_index=True).reindex(columns=cols)


def downstream_md(table: pd.DataFrame, base: str) -> str:
    """The section: the table, then which tasks no recipe scores above chance on."""
    rows = [f"| {r.task} | `{r.label}` | {r.n} | {fmt(r.acc)} | "
            + (f"[{fmt(r.acc_lo)}, {fmt(r.acc_hi)}]" if pd.notna(r.acc_lo) else "")
            + f" | {fmt(r.chance)} | {_yes_no(r.above_chance)} | "
            + ("" if r.label == base else signed(r.gap_pct)) + " | "
            + (f"[{signed(r.gap_lo)}, {signed(r.gap_hi)}]" if pd.notna(r.gap_lo) else "")
            + f" | {'' if pd.isna(r.verdict) else r.verdict} |" for r in table.itertuples()]
    return ("## Downstream tasks (lm-eval)\n\n"
            "Accuracy per recipe, the forward pass as trained (`nvfp4-lab eval`; each run's "
            "`eval.json`): mean over seeds with its 95% t interval. Gap = relative excess "
            f"error rate (1 - accuracy) over `{base}`, per seed (paired), then averaged; "
            f"{GAP_CONVENTION}. Above chance: the mean accuracy exceeds guessing (1 / choices) "
            f"by more than {Z} standard errors (lm-eval's, over documents).\n\n"
            f"| task | recipe | seeds | accuracy | 95% CI | chance | above chance | gap to "
            f"{base}, % ({GAP_CONVENTION}) | gap 95% CI | verdict |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows)
            + chance_md(table))


def chance_md(table: pd.DataFrame) -> str:
    """The sentence for the tasks no recipe scores above chance on ("" when there are none)."""
    at_chance = [task for task, part in table.groupby("task", sort=False)
                 if part["chance"].notna().all() and not part["above_chance"].any()]
    if not at_chance:
        return ""
    return ("\n\nAt chance: no recipe scores above guessing on "
            + ", ".join(f"`{t}`" for t in at_chance) + ". The model is too small for "
            + ("this task" if len(at_chance) == 1 else "these tasks")
            + " to mean anything, and the gaps there are noise: at lab scale (0.74M "
            "parameters) downstream accuracy sits at chance; the table is for the GPU scale.")


def _yes_no(flag) -> str:
    return "" if pd.isna(flag) else "yes" if flag else "no"
