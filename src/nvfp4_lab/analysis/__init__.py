"""Results: read run and sweep directories, compare recipes, draw the paper's figures.

    collect       run/sweep dirs and globs -> tidy pandas tables (runs, curves, layers, skipped)
    stats         means and t intervals over seeds, paired gaps to a baseline, verdicts
    verdicts      own-spread intervals, TOST, Holm and BH, seeds for 80%
    carry         the paper's gap carried to the lab's regime by the gap's law
    coverage      how often an interval rule covers the true gap, simulated
    claims        every claim of the published sweeps tested together, counted once
    context       a run read against the published intervals; what --dry-run says they need
    index         results/README.md, claims.csv and the forest figure
    gaps          loss-gap curves over tokens, token multipliers (token efficiency)
    scaling       the gap's law in tokens per parameter and size, fitted and extrapolated
    paper         the paper's reported numbers, stored in nvfp4_lab/paper/
    figures       matplotlib figures (PNG and PDF)
    paper_figures the paper's numbers beside ours: bars, and the index's forest of claims
    report        report.md + tables + figures for a sweep (also drawn when a sweep ends)

Reads files only, never models: nothing here imports torch.
"""
from . import figures
from .collect import Collection, collect, find_runs, find_sweeps
from .gaps import (
                   Multiplier,
                   curve_efficiency_table,
                   curve_multiplier,
                   efficiency_table,
                   gap_curves,
                   token_multiplier,
)
from .paper import PaperResult, load_paper
from .report import write_report
from .stats import Interval, mean_ci, paired_gaps, recipe_table

__all__ = ["Collection", "Interval", "Multiplier", "PaperResult", "collect",
           "curve_efficiency_table", "curve_multiplier", "efficiency_table", "figures",
           "find_runs", "find_sweeps", "gap_curves", "load_paper", "mean_ci", "paired_gaps",
           "recipe_table", "token_multiplier", "write_report"]
