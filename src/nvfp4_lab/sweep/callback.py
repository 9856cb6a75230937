"""Hydra callbacks for sweeps: check every arm before the first job, summarise after the last.

``on_multirun_start`` merges each arm of the ablation onto the sweep's config and builds its
recipe, so a typo in an arm fails before any job has run (Hydra itself composes every job up
front, but an arm is data inside the config, not a config group), and writes the sweep's plan
(``sweep/plan.py``: its jobs, their estimates, the cores), which each job reads.
``on_multirun_end`` walks the sweep directory, reads each job's ``summary.json`` and writes
``sweep_summary.csv`` (one row per job, pandas), then ends the command with exit status 1 when
a job failed or diverged: the sweep has gone on past it, its caller still learns of it
(``SystemExit`` passes Hydra's callback guard, which turns an ``Exception`` into a warning).
The sweep's report is another callback's, ``analysis.reports.report.SweepReport``, which the config
lists after this one, so that it is drawn first (Hydra ends callbacks last listed first) and
``train`` imports nothing of ``analysis``.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pandas as pd
from hydra.core.global_hydra import GlobalHydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, open_dict

from ..config.schema import apply_arm, recipe_of
from ..rundir import COLUMNS, SUMMARY, Summary, sweep_jobs
from .plan import SweepPlan, parallel_jobs, plan_job
from .threads import machine_cores


def summarise(sweep_dir: Path) -> pd.DataFrame:
    """One row per job directory (any depth) holding a ``summary.json``, the columns in the
    order of ``rundir.Summary``'s fields."""
    rows = []
    for path in sorted(Path(sweep_dir).rglob(SUMMARY)):
        summary = Summary.read(path.parent)
        assert summary is not None     # its summary.json was just found
        rows.append({"job": str(path.parent.relative_to(sweep_dir)),
                     **dataclasses.asdict(summary), "status": summary.status.value})
    return pd.DataFrame(rows, columns=list(COLUMNS))


class SweepSummary(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        for arm in config.get("arms", {}):
            with open_dict(config):
                trial = config.copy()
                trial.arm = arm
            recipe_of(apply_arm(trial).quant)
        jobs = sweep_jobs(config.hydra.sweeper.get("params") or {}, config.hydra.overrides.task)
        loader = GlobalHydra.instance().config_loader()
        parallel, cores = parallel_jobs(config.hydra.launcher), machine_cores()
        SweepPlan(tuple(plan_job(o, loader.load_sweep_config(config, o), parallel, cores)
                        for o in jobs), parallel, cores).save(Path(config.hydra.sweep.dir))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        df = summarise(sweep_dir)
        df.to_csv(sweep_dir / "sweep_summary.csv", index=False)
        bad = df[df["status"] != "done"] if len(df) else df
        print(f"sweep {sweep_dir}: {len(df) - len(bad)}/{len(df)} jobs done"
              + "".join(f"\n  {r.job}: {r.status} {r.error or ''}" for r in bad.itertuples()))
        if len(bad):
            raise SystemExit(1)
