"""Weights & Biases beside CSV and TensorBoard (``logger=wandb``): the check that a run can
report there, asked before anything is written, and the logger that reports it.

The check imports neither torch nor Lightning (``preflight`` asks it for the command line, the
task again for a run started otherwise): the ``wandb`` package (the ``wandb`` extra) and, in
online mode, an API key and a server that answers. Without a key, W&B prompts for one on a
terminal (and waits) or fails inside the run; without a network, ``wandb.init`` retries for
about 90 seconds, then fails.

The logger is Lightning's ``WandbLogger``, writing under the run's ``logs/wandb/``: the W&B run
is named after the run directory (in a sweep, the job's directory under the sweep's), grouped
by its sweep, tagged with the run or sweep name and the recipe (an arm's name), and given the
resolved config; its id comes from the directory and the first attempt's start, so a resumed
run continues its W&B run. ``close`` puts the run's ``summary.json`` fields into the W&B run's
summary and finishes it, so that the next job of a sweep in the same process starts its own.
Lightning writes from rank 0 only, and the task calls ``close`` there only.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import netrc
import os
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from omegaconf import DictConfig, OmegaConf

from .schema import LoggerConfig, WandbMode

if TYPE_CHECKING:
    from lightning.pytorch.loggers import WandbLogger

    from ..rundir import Summary

INSTALL = "pip install 'nvfp4-lab[wandb]'"
OFFLINE = "or log offline with logger.mode=offline and `wandb sync` the run later"
PROBE_SECONDS = 10


def refusal(cfg: LoggerConfig) -> str | None:
    """Why the run cannot report to W&B as configured, in one line; None when it can or W&B
    is off."""
    if not cfg.wandb:
        return None
    if importlib.util.find_spec("wandb") is None:
        return f"logger=wandb needs the wandb package: {INSTALL}"
    if cfg.mode != WandbMode.online:
        return None
    import wandb

    settings = wandb.Settings()     # as wandb.init reads them: the settings files, then
    settings.update_from_system_settings()      # the environment
    settings.update_from_env_vars(dict(os.environ))
    if not _has_credentials(settings):
        return ("logger.mode=online: no W&B API key (set WANDB_API_KEY or run `wandb login`); "
                + OFFLINE)
    return _unreachable(settings.base_url)


def _has_credentials(settings) -> bool:
    """Whether ``wandb.init`` finds credentials without asking: an API key or an identity
    token file in the settings or the environment, or a ``.netrc`` entry for the server."""
    if settings.api_key or settings.identity_token_file:
        return True
    try:
        rc = netrc.netrc(os.environ.get("NETRC"))       # None: ~/.netrc
    except (OSError, netrc.NetrcParseError):
        return False
    return rc.authenticators(urlparse(settings.base_url).hostname or "") is not None


@functools.cache
def _unreachable(url: str) -> str | None:
    """Why the W&B server at ``url`` does not answer within ``PROBE_SECONDS``, or None (once
    per process: a sweep's jobs share the answer)."""
    import requests

    try:
        requests.head(url, timeout=PROBE_SECONDS)
    except requests.RequestException as err:
        return (f"logger.mode=online: the W&B server {url} does not answer "
                f"({type(err).__name__}); check the network, " + OFFLINE)
    return None


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
