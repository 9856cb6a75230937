"""Results: read run and sweep directories, compare recipes, draw the paper's figures.

Five sub-packages, each importing only those listed before it:

    sources    what is read: runs as tables (collect), machine classes, the paper's numbers
    inference  intervals and the one paired gap (stats), verdicts, gap curves, coverage
    laws       the gap's laws (scaling, steps or size) and the paper's gaps carried by them
    findings   the claims tested together and counted once, a run read against them
    reports    a sweep's report and figures, the results index, publishing

Reads files only, never models: nothing here imports torch.
"""
from .inference.gaps import (
           Multiplier,
           curve_efficiency_table,
           curve_multiplier,
           efficiency_table,
           gap_curves,
           token_multiplier,
)
from .inference.stats import Interval, mean_ci, paired_gaps, recipe_table
from .reports import figures
from .reports.report import write_report
from .sources.collect import Collection, collect, find_runs, find_sweeps
from .sources.paper import PaperResult, load_paper

__all__ = ["Collection", "Interval", "Multiplier", "PaperResult", "collect",
           "curve_efficiency_table", "curve_multiplier", "efficiency_table", "figures",
           "find_runs", "find_sweeps", "gap_curves", "load_paper", "mean_ci", "paired_gaps",
           "recipe_table", "token_multiplier", "write_report"]
