"""Whether a run can report to Weights & Biases as configured (``logger=wandb``), asked
before anything is written: by ``preflight`` for the command line, by the task again for a run
started otherwise. It imports neither torch nor Lightning: the ``wandb`` package (the
``wandb`` extra) and, in online mode, an API key and a server that answers. Without a key,
W&B prompts for one on a terminal (and waits) or fails inside the run; without a network,
``wandb.init`` retries for about 90 seconds, then fails. The logger is ``train/wandb_log.py``.
"""
from __future__ import annotations

import functools
import importlib.util
import netrc
import os
from typing import Any
from urllib.parse import urlparse

from .schema import LoggerConfig

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
    if cfg.mode != "online":
        return None
    import wandb

    settings = wandb.Settings()     # as wandb.init reads them: the settings files, then
    settings.update_from_system_settings()      # the environment
    settings.update_from_env_vars(dict(os.environ))
    if not _has_credentials(settings):
        return ("logger.mode=online: no W&B API key (set WANDB_API_KEY or run `wandb login`); "
                + OFFLINE)
    return _unreachable(settings.base_url)


def _has_credentials(settings: Any) -> bool:
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
