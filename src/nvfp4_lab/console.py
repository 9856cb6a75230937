"""What a run says: one line for the terminal and the same line, timed, in the run's cli.log.

A user who comes back to a run finds in its ``cli.log`` what the terminal showed: the thread
plan, the backend, the layer report, every progress line and the outcome. Each goes through
``say`` to the ``nvfp4_lab.run`` logger, which Hydra's job logging (``hydra.job_logging`` in
conf/config.yaml) sends to two handlers: the terminal's (``TerminalHandler``), message only,
and the run directory's file, with the time. Where a rich bar stands in for the progress lines
(train/progress.py), they go to the file alone: ``TerminalFilter`` drops them from the
terminal. Outside a Hydra job (the library called directly) ``say`` prints.

Lightning's own lines (the accelerators found, a checkpoint folder reused) take the same
handlers, once each (``adopt_lightning_log``), and its adverts for its cloud services none.
"""
from __future__ import annotations

import logging
import sys
from typing import TextIO

LOG = logging.getLogger("nvfp4_lab.run")
RANK_ZERO = "lightning.pytorch.utilities.rank_zero"   # the logger of Lightning's rank_zero_info
ADVERT = "💡 Tip"                                     # how Lightning's adverts begin


def say(text: str, terminal: bool = True) -> None:
    """``text`` for the terminal (unless ``terminal`` is False) and the run's cli.log."""
    if LOG.getEffectiveLevel() > logging.INFO or not LOG.hasHandlers():
        if terminal:
            print(text, flush=True)
        return
    LOG.info(text, extra={"terminal": terminal})


class TerminalHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The terminal's handler: writes to ``sys.stdout`` as it is at each line, not as it was
    when logging was set up. A rich bar swaps in a stdout that prints lines above the bar; a
    line written past it is drawn over by the bar's next redraw, which leaves a stale bar."""

    def __init__(self, stream: object = None):
        """``stream``: ignored (Hydra's default job logging, merged under ours, names one)."""
        logging.Handler.__init__(self)

    @property
    def stream(self) -> TextIO:
        return sys.stdout


class TerminalFilter(logging.Filter):
    """On the terminal's handler: the records not marked for the file alone."""

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "terminal", True)


class DropAdvert(logging.Filter):
    """On Lightning's rank-zero logger: every record but an advert."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(ADVERT)


_DROP_ADVERT = DropAdvert()


def adopt_lightning_log() -> None:
    """Lightning's lines through the run's handlers alone, and its adverts nowhere.

    ``import lightning`` gives the ``lightning`` logger a handler of its own (``INFO: ...``
    on stderr), and its subpackages one more where the root has none yet, while the records
    also reach the root's: under Hydra's job logging every line showed twice. Where the root
    has handlers (a job's) Lightning's go; without them (the library called directly) they
    stay, so that the lines still show."""
    logging.getLogger(RANK_ZERO).addFilter(_DROP_ADVERT)
    if not logging.getLogger().handlers:
        return
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        log = logging.getLogger(name)
        for handler in log.handlers[:]:
            log.removeHandler(handler)
        log.propagate = True


def duration(seconds: float) -> str:
    """``45s``, ``6m12s``, ``2h10m``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
