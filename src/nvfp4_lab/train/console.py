"""What a run says: one line for the terminal and the same line, timed, in the run's cli.log.

A user who comes back to a run finds in its ``cli.log`` what the terminal showed: the thread
plan, the backend, the layer report, every progress line and the outcome. Each goes through
``say`` to the ``nvfp4_lab.run`` logger, which Hydra's job logging (``hydra.job_logging`` in
conf/config.yaml) sends to two handlers: the terminal's, message only, and the run
directory's file, with the time. Where a rich bar stands in for the progress lines
(train/progress.py), they go to the file alone: ``TerminalFilter`` drops them from the
terminal. Outside a Hydra job (the library called directly) ``say`` prints.
"""
from __future__ import annotations

import logging

LOG = logging.getLogger("nvfp4_lab.run")


def say(text: str, terminal: bool = True) -> None:
    """``text`` for the terminal (unless ``terminal`` is False) and the run's cli.log."""
    if LOG.getEffectiveLevel() > logging.INFO or not LOG.hasHandlers():
        if terminal:
            print(text, flush=True)
        return
    LOG.info(text, extra={"terminal": terminal})


class TerminalFilter(logging.Filter):
    """On the terminal's handler: the records not marked for the file alone."""

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "terminal", True)


def duration(seconds: float) -> str:
    """``45s``, ``6m12s``, ``2h10m``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
