"""Weights & Biases beside CSV and TensorBoard (``logger=wandb``): the logger that reports a
run there (whether it can is ``config/wandb_check.py``'s question, asked first).

The logger is Lightning's ``WandbLogger``, writing under the run's ``logs/wandb/``: the W&B run
is named after the run directory (in a sweep, the job's directory under the sweep's), grouped
by its sweep, tagged with the run or sweep name and the recipe (an arm's name), and given the
resolved config; its id comes from the directory and the first attempt's start, so a resumed
run continues its W&B run. ``close`` puts the run's ``summary.json`` fields into the W&B run's
summary and finishes it, so that the next job of a sweep in the same process starts its own.
Lightning writes from rank 0 only, and the task calls ``close`` there only.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from ..config.schema import LoggerConfig

if TYPE_CHECKING:
    from lightning.pytorch.loggers import WandbLogger

    from ..rundir import Summary


def logger(conf: LoggerConfig, cfg: DictConfig, out: Path, started: str,
           sweep: Path | None) -> WandbLogger | None:
    """The W&B logger of the run in ``out`` (``cfg``: its config, arm applied; ``started``:
    its first attempt's start; ``sweep``: its sweep's directory), or None when W&B is off."""
    if not conf.wandb:
        return None
    from lightning.pytorch.loggers import WandbLogger

    # Hydra's sweep directory is relative to the working directory, the job's absolute
    job = out.resolve().relative_to(sweep.resolve()) if sweep else Path(cfg.name) / out.name
    return WandbLogger(
        name=job.as_posix(), save_dir=out / "logs", id=run_id(out, started),
        project=conf.project, entity=conf.entity, mode=conf.mode,
        group=f"{cfg.name}/{sweep.name}" if sweep else None,
        tags=list(dict.fromkeys([cfg.name, cfg.quant.name])),
        config=OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))


def run_id(out: Path, started: str) -> str:
    """The W&B run id of the run in ``out`` first started at ``started``: the same for each
    attempt, another for another run."""
    return hashlib.sha256(f"{out.resolve()}\0{started}".encode()).hexdigest()[:16]


def close(wandb_logger: WandbLogger, summary: Summary) -> None:
    """Attach the run's summary to its W&B run and finish that (failed unless ``done``);
    nothing where no W&B run started (a run that failed before its first log, or whose
    ``wandb.init`` failed: starting one now could wait as long again)."""
    import wandb

    if wandb.run is None:
        return
    run = wandb_logger.experiment
    run.summary.update(summary.record())
    run.finish(exit_code=0 if summary.status == "done" else 1)
