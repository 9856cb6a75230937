"""Hydra callbacks for sweeps: check every arm before the first job, summarise after the last.

``on_multirun_start`` merges each arm of the ablation onto the sweep's config and builds its
recipe, so a typo in an arm fails before any job has run (Hydra itself composes every job up
front, but an arm is data inside the config, not a config group), and counts the jobs for the
progress lines (``SWEEP_JOBS``, read by each job; a joblib worker inherits it).
``on_multirun_end`` walks the sweep directory, reads each job's ``summary.json`` and writes
``sweep_summary.csv`` (one row per job, pandas) and the sweep's report (``analysis.report``:
report.md, tables, figures); jobs that failed or diverged are counted so that the command can
exit non-zero after the sweep has gone on (``cli.py`` reads ``SweepSummary.failed``). A report
that cannot be drawn is reported, never raised: the runs are what matters and ``nvfp4-lab
plot`` can redraw it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, open_dict

from ..analysis.report import write_report
from .preview import expand
from .schema import apply_arm, recipe_of
from .threads import CORES, CORES_ENV

SWEEP_JOBS = "NVFP4_LAB_SWEEP_JOBS"

COLUMNS = ["job", "status", "quant", "arm", "seed", "model", "steps", "tokens",
           "final_val_loss", "best_val_loss", "final_val_bpb", "final_train_loss",
           "wall_seconds", "tokens_per_second", "backend", "device", "error"]


def summarise(sweep_dir: Path) -> pd.DataFrame:
    """One row per job directory (any depth) holding a ``summary.json``."""
    rows = []
    for path in sorted(Path(sweep_dir).rglob("summary.json")):
        s = json.loads(path.read_text())
        rows.append({"job": str(path.parent.relative_to(sweep_dir)), **s})
    df = pd.DataFrame(rows)
    return df.reindex(columns=COLUMNS + sorted(set(df.columns) - set(COLUMNS)))


class SweepSummary(Callback):
    failed = 0

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        for arm in config.get("arms", {}):
            with open_dict(config):
                trial = config.copy()
                trial.arm = arm
            recipe_of(apply_arm(trial).quant)
        jobs = expand(config.hydra.sweeper.get("params") or {}, config.hydra.overrides.task)
        os.environ[SWEEP_JOBS] = str(len(jobs))
        os.environ.setdefault(CORES_ENV, str(CORES))   # the cores the workers divide

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        df = summarise(sweep_dir)
        df.to_csv(sweep_dir / "sweep_summary.csv", index=False)
        bad = df[df["status"] != "done"] if len(df) else df
        SweepSummary.failed = len(bad)
        print(f"sweep {sweep_dir}: {len(df) - len(bad)}/{len(df)} jobs done"
              + "".join(f"\n  {r.job}: {r.status} {r.error or ''}" for r in bad.itertuples()))
        try:
            print(f"report: {write_report([sweep_dir])}")
        except Exception as err:  # noqa: BLE001 - any drawing error must not fail the sweep
            print(f"no report for {sweep_dir} ({type(err).__name__}: {err}); "
                  f"retry with: nvfp4-lab plot {sweep_dir}")
