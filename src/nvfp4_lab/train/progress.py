"""Progress and throughput: a rich bar on a terminal, one plain line per interval elsewhere.

In CI, in log files and inside sweeps a redrawn bar is noise, so ``auto`` picks Lightning's
``RichProgressBar`` only when stdout is a terminal and the job is not part of a sweep, and
otherwise prints a line every ``log_every`` steps. Tokens per second are measured here in every
mode and logged as ``tokens_per_second`` (wall time between log intervals, so validation and
checkpointing count against it, as they do against a real run).
"""
from __future__ import annotations

import logging
import os
import sys
import time
import warnings

from lightning.pytorch.callbacks import Callback, RichProgressBar


class Speedometer(Callback):
    """Log ``tokens_per_second`` every ``every`` steps; print a line if ``echo``.

    Lightning validates after the training batch of a step, so at a step that is also a
    validation step (``val_every``) the line waits for that validation and shows its loss,
    not the previous one's.
    """

    def __init__(self, every: int, tokens_per_step: int, echo: bool, val_every: int = 0):
        self.every, self.tokens_per_step, self.echo = every, tokens_per_step, echo
        self.val_every = val_every
        self._t0 = self._step0 = None
        self._pending: tuple[int, int, float, float] | None = None  # step, max, loss, rate

    def on_train_start(self, trainer, pl_module):
        self._t0, self._step0 = time.perf_counter(), trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step % self.every or step == self._step0:
            return
        now = time.perf_counter()
        rate = (step - self._step0) * self.tokens_per_step / max(now - self._t0, 1e-9)
        self._t0, self._step0 = now, step
        pl_module.log("tokens_per_second", rate, on_step=True, on_epoch=False)
        if self.echo and trainer.is_global_zero:
            line = (step, trainer.max_steps, float(trainer.callback_metrics["train_loss"]), rate)
            if self.val_every and step % self.val_every == 0:
                self._pending = line
            else:
                self._print(line, trainer.callback_metrics)

    def on_validation_end(self, trainer, pl_module):
        if self._pending is not None and self._pending[0] == trainer.global_step:
            self._print(self._pending, trainer.callback_metrics)
            self._pending = None

    def on_train_end(self, trainer, pl_module):
        if self._pending is not None:         # a deferred line whose validation never came
            self._print(self._pending, trainer.callback_metrics)
            self._pending = None

    @staticmethod
    def _print(line: tuple[int, int, float, float], metrics) -> None:
        step, max_steps, loss, rate = line
        val = f"  val_loss {float(metrics['val_loss']):.4f}" if "val_loss" in metrics else ""
        print(f"step {step}/{max_steps}  train_loss {loss:.4f}{val}  {rate:,.0f} tok/s",
              flush=True)


def quiet_lightning() -> None:
    """Drop Lightning's per-run banners (accelerators available, the LitLogger tip, "fit
    stopped") and one internal deprecation notice from plain logs and sweeps, where they
    repeat for every job. They are ``rank_zero_info`` messages; a real warning still shows."""
    logging.getLogger("lightning.pytorch.utilities.rank_zero").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")


def wants_rich(progress: str, multirun: bool) -> bool:
    if progress == "rich":
        return True
    return (progress == "auto" and not multirun and sys.stdout.isatty()
            and "CI" not in os.environ)


def progress_callbacks(progress: str, multirun: bool, every: int, tokens_per_step: int,
                       val_every: int = 0) -> list[Callback]:
    rich = wants_rich(progress, multirun)
    speed = Speedometer(every, tokens_per_step, echo=not rich and progress != "none",
                        val_every=val_every)
    return [RichProgressBar(), speed] if rich else [speed]
