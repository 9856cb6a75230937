"""Publishing a sweep: its small files copied into ``results/``, where the index reads them.

``nvfp4-lab publish SWEEP`` copies a finished sweep's small files (per run: ``config.yaml``,
``summary.json``, ``metrics.csv`` and, once scored, ``eval.json``; per sweep:
``multirun.yaml``, ``sweep_summary.csv``) into ``results/<ablation>/`` (or ``--as
v2/<folder>`` for a design-v2 sweep); checkpoints and event files stay behind. A published
folder is never overwritten. A study (``STUDIES``: the scaling grid, which runs over several
sessions) is published as it grows instead.

A published report cites what the other published sweeps found of its claims; ``redraw``
rewrites them all (``nvfp4-lab plot --index``), so that none cites a superseded row.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from ...sweepdir import MULTIRUN, SweepDir
from ..sources.collect import find_sweeps
from .report import write_report

# The order results are run and listed in: the headline (formats) first, then roughly by how
# likely a small scale is to show the effect (docs/experiments.md, Small scale).
ABLATIONS = ("formats", "consistency", "sr_placement", "precision_switch", "components",
             "cumulative", "rht_gemms", "token_efficiency", "bf16_layers", "rht_size",
             "rht_signs")
# sweeps that go beyond the paper, each with its sources' claims in nvfp4_lab/paper/<name>.yaml:
# published and indexed like the ablations, in a table of their own
BEYOND_PAPER = ("recipes",)
# studies that run over several sessions: published as they grow (``publish`` adds the finished
# runs a folder lacks, never touching one it has), read by their own report, not the claims
STUDIES = ("scaling", "steps_vs_size")
PENDING = "pending"      # results/pending/: runs of sweeps not yet whole, read by nothing
RUN_FILES = ("config.yaml", "summary.json", "metrics.csv", "eval.json")   # eval.json: if scored
SWEEP_FILES = (MULTIRUN, "sweep_summary.csv")


def publish(sweep: Path, results: Path, folder: str | None = None) -> Path:
    """Copy a finished sweep's small files to ``results/<folder or its name>/``; never over an
    existing folder (a published result is replaced only by deleting it first, on purpose)."""
    read = SweepDir.read(sweep)
    if read is None:
        raise FileNotFoundError(f"{sweep} holds no {MULTIRUN}: not a sweep directory; "
                                "publish takes the folder of a finished sweep (-m)")
    name = read.name
    if name in STUDIES:
        return _grow(sweep, results / (folder or name))
    if name not in ABLATIONS + BEYOND_PAPER:
        raise ValueError(f"{sweep}: name={name!r} is not a paper ablation "
                         f"({', '.join(ABLATIONS)}), a comparison beyond it "
                         f"({', '.join(BEYOND_PAPER)}) or a study ({', '.join(STUDIES)})")
    dest = results / (folder or name)
    if dest.exists():
        raise FileExistsError(f"{dest} exists: a published result is never overwritten; "
                              f"delete it first to replace it")
    summary = pd.read_csv(sweep / "sweep_summary.csv")
    unfinished = summary[~summary["status"].isin(["done", "diverged"])]
    if len(unfinished):
        raise ValueError(f"{sweep}: {len(unfinished)} jobs not finished "
                         f"({', '.join(unfinished['job'])}); resume the sweep before publishing")
    for job in summary["job"]:
        for f in RUN_FILES:
            if (sweep / job / f).exists():
                (dest / job).mkdir(parents=True, exist_ok=True)
                shutil.copy2(sweep / job / f, dest / job / f)
    for f in SWEEP_FILES:
        shutil.copy2(sweep / f, dest / f)
    return dest


def redraw(results: Path) -> dict[Path, bool]:
    """Rewrite the report of every sweep published under ``results``, PNG figures only (as
    ``publish`` draws them); returns each report's path and whether its text changed (one
    that says nothing new keeps its file, date included)."""
    sweeps = [sweep for sweep in find_sweeps(results) if SweepDir.read(sweep) is not None
              and PENDING not in sweep.relative_to(results).parts]
    before = {sweep: _text(sweep / "report.md") for sweep in sweeps}
    return {(path := draw(sweep, results)): path.read_text() != before[sweep]
            for sweep in sweeps}


def draw(folder: Path, results: Path) -> Path:
    """Write the report of the sweep published in ``folder`` (PNG figures only); the
    steps-or-size study's with the law refitted on it and the scaling grid of ``results``,
    where that is published."""
    grid = results / "scaling"
    refit = SweepDir.read(folder).name == "steps_vs_size" and SweepDir.read(grid) is not None
    return write_report([folder], folder, pdf=False, grid=grid if refit else None)


def _text(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


def _grow(sweep: Path, dest: Path) -> Path:
    """Add the study's finished runs that ``dest`` lacks; a run already there is left as it
    is, a run not finished is left for a later publication. A sweep of another grid (other
    overrides or sweeper parameters in its ``multirun.yaml``) is refused."""
    have, new = SweepDir.read(dest), SweepDir.read(sweep)
    if have is not None and have.grid != new.grid:
        raise ValueError(f"{dest} holds another grid's runs ({have.grid}, not "
                         f"{new.grid}); publish this one --as another folder")
    dest.mkdir(parents=True, exist_ok=True)
    if have is None:
        shutil.copy2(sweep / MULTIRUN, dest / MULTIRUN)
    for run in new.done():
        job = run.relative_to(sweep)
        if not (dest / job).exists():
            (dest / job).mkdir(parents=True)
            for f in RUN_FILES:
                if (run / f).exists():
                    shutil.copy2(run / f, dest / job / f)
    return dest
