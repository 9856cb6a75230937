"""Progress and throughput: a rich bar on a terminal, one plain line per interval elsewhere.

In CI and in log files a redrawn bar is noise, and parallel jobs would draw over each other, so
``auto`` picks a rich bar (Lightning's ``RichProgressBar``: elapsed and remaining time of the
job) only when stdout is a terminal and at most one job runs at a time; otherwise it prints a
line every ``log_every`` steps. Tokens per second are measured here in every mode and logged as
``tokens_per_second`` (wall time between log intervals, so validation and checkpointing count
against it, as they do against a real run).

Both modes say how long is left: for the job, from its own steps per second since it started
(or resumed); for a sweep, the job's remainder and then the jobs after it at the estimates of
the sweep's plan (``sweep/plan.py``: this machine's timings for each recipe), laid out
on the slots that run at once. A later job never measured here counts at this job's length,
and the figure says it guessed (``sweep ~2h10m?``).
"""
from __future__ import annotations

import logging
import os
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from lightning.pytorch.callbacks import Callback, RichProgressBar

from ..console import RANK_ZERO, duration, say
from ..sweep.plan import SweepPlan


@dataclass(frozen=True)
class SweepPosition:
    """Where a job stands in its sweep: ``job`` (0-based, Hydra's ``job.num``) of the sweep's
    ``plan`` (None: the sweep wrote none), in the sweep directory ``dir``."""

    job: int
    plan: SweepPlan | None = None
    dir: Path | None = None

    @property
    def jobs(self) -> int:
        return len(self.plan.jobs) if self.plan else 0

    @property
    def parallel(self) -> int:
        return self.plan.parallel if self.plan else 1


PAUSE = 20      # an interval this many times slower a step than the median one is a pause


class Countdown:
    """Time left, at the pace of the later half of the steps done since ``start`` (the first
    step, or the resumed one): a slow start, the reference's probe steps before a compile or a
    first validation, drops out of it as the job goes on. An interval between two calls ``PAUSE``
    times slower a step than the median one does not count: the process was stopped (SIGSTOP
    while a benchmark runs, a laptop asleep), and the steps after it run at the old pace."""

    def __init__(self, position: SweepPosition | None = None):
        self.position = position
        self._marks: list[tuple[float, int]] = []    # (time, step) at each call

    def start(self, step: int) -> None:
        self._marks = [(time.perf_counter(), step)]

    def mark(self, step: int) -> None:
        """Note that ``step`` is done now. Marked every step, a compile inside one step (auto's
        switch after its probe) is a pause among steady steps, not part of the pace."""
        if self._marks and step > self._marks[-1][1]:
            self._marks.append((time.perf_counter(), step))

    def left(self, step: int, max_steps: int) -> tuple[float, str | None] | None:
        """(seconds left in the job, the sweep's time left as text or None); None before the
        first step."""
        if not self._marks or step <= self._marks[0][1]:
            return None
        half = (self._marks[0][1] + step) / 2
        first = max(i for i, m in enumerate(self._marks) if m[1] <= half)
        self.mark(step)
        per_step = _pace(self._marks[first:])
        job = (max_steps - step) * per_step
        p = self.position
        if p is None or p.jobs <= 1:
            return job, None
        sweep, guessed = p.plan.left_after(p.job, job, max_steps * per_step)
        return job, f"~{duration(sweep)}" + ("?" if guessed else "")

    def text(self, step: int, max_steps: int) -> str:
        """``eta 6m12s`` (and ``job 4/18, sweep ~2h10m``); empty before the first step."""
        left = self.left(step, max_steps)
        if left is None:
            return ""
        job, sweep = left
        p = self.position
        return f"eta {duration(job)}" + (
            f"  (job {p.job + 1}/{p.jobs}, sweep {sweep})" if sweep is not None else "")


def _pace(marks: list[tuple[float, int]]) -> float:
    """Seconds a step over ``marks`` (time, step), leaving out the pauses (``Countdown``)."""
    spans = [(t1 - t0, s1 - s0) for (t0, s0), (t1, s1) in zip(marks, marks[1:])]
    typical = statistics.median(dt / ds for dt, ds in spans if ds > 0)
    kept = [(dt, ds) for dt, ds in spans if dt <= PAUSE * typical * max(ds, 1)]
    return sum(dt for dt, _ in kept) / sum(ds for _, ds in kept)


class Speedometer(Callback):
    """Log ``tokens_per_second`` every ``every`` steps and a plain line to the run's cli.log,
    also on the terminal if ``echo`` (console.py).

    Lightning validates after the training batch of a step, so at a step that is also a
    validation step (``val_every``) the line waits for that validation and shows its loss,
    not the previous one's. Between validations the line repeats the last one with the step
    it was measured at (``val_loss 1.8863 @500``), so it does not read as new.
    """

    def __init__(self, every: int, tokens_per_step: int, echo: bool, val_every: int = 0,
                 position: SweepPosition | None = None):
        self.every, self.tokens_per_step, self.echo = every, tokens_per_step, echo
        self.val_every = val_every
        self.countdown = Countdown(position)
        self._t0 = self._step0 = None
        self._pending: tuple[int, int, float, float, str] | None = None
        self._val: tuple[int, float] | None = None    # (step, loss) of the last validation

    def on_train_start(self, trainer, pl_module):
        self._t0, self._step0 = time.perf_counter(), trainer.global_step
        self.countdown.start(trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        self.countdown.mark(step)
        if step % self.every or step == self._step0:
            return
        now = time.perf_counter()
        rate = (step - self._step0) * self.tokens_per_step / max(now - self._t0, 1e-9)
        self._t0, self._step0 = now, step
        pl_module.log("tokens_per_second", rate, on_step=True, on_epoch=False)
        if trainer.is_global_zero:
            line = (step, trainer.max_steps, float(trainer.callback_metrics["train_loss"]), rate,
                    self.countdown.text(step, trainer.max_steps))
            if self.val_every and step % self.val_every == 0:
                self._pending = line
            else:
                self._print(line)

    def on_validation_end(self, trainer, pl_module):
        if "val_loss" in trainer.callback_metrics:
            self._val = (trainer.global_step, float(trainer.callback_metrics["val_loss"]))
        if self._pending is not None and self._pending[0] == trainer.global_step:
            self._print(self._pending)
            self._pending = None

    def on_train_end(self, trainer, pl_module):
        if self._pending is not None:         # a deferred line whose validation never came
            self._print(self._pending)
            self._pending = None

    def _print(self, line: tuple[int, int, float, float, str]) -> None:
        step, max_steps, loss, rate, eta = line
        val = ""
        if self._val is not None:
            at, value = self._val
            val = f"  val_loss {value:.4f}" + (f" @{at}" if at != step else "")
        say(f"step {step}/{max_steps}  train_loss {loss:.4f}{val}  {rate:,.0f} tok/s"
            + (f"  {eta}" if eta else ""), terminal=self.echo)


class SweepProgressBar(RichProgressBar):
    """Lightning's rich bar (its own columns: steps, elapsed time, speed, metrics) with the
    job's time left, and its place in the sweep and the sweep's time left, as the bar's
    description (rich's own remaining-time column stays empty until it trusts its speed)."""

    def __init__(self, position: SweepPosition | None):
        super().__init__()
        self.countdown = Countdown(position)

    def on_train_start(self, trainer, pl_module):
        super().on_train_start(trainer, pl_module)
        self.countdown.start(trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if self.progress is not None and self.train_progress_bar_id is not None:
            self.progress.update(self.train_progress_bar_id,
                                 description=self._get_train_description(trainer.current_epoch))

    def get_metrics(self, trainer, pl_module):
        return bar_metrics(super().get_metrics(trainer, pl_module))

    def _get_train_description(self, current_epoch: int) -> str:
        """``eta 6m12s`` or, in a sweep, ``job 4/18 · eta 6m12s · sweep ~2h10m``."""
        left = self.countdown.left(self.trainer.global_step, self.trainer.max_steps)
        job, sweep = (f"eta {duration(left[0])}", left[1]) if left else ("starting", None)
        p = self.countdown.position
        if p is None or p.jobs <= 1:
            return job
        return f"job {p.job + 1}/{p.jobs} · {job}" + (
            f" · sweep {sweep}" if sweep is not None else "")


BAR_FORMATS = {"tokens": ",.0f", "lr": ".1e"}   # the rest at the bar's own 3 decimals


def bar_metrics(metrics: dict) -> dict:
    """The bar's metrics: tokens whole (``81,920``), the learning rate in scientific notation
    (``3.0e-03``; at 3 decimals a decayed one reads 0.000), and no ``v_num`` (Lightning's
    logger version, always 0 here: the run directory names the run)."""
    return {k: format(v, BAR_FORMATS[k]) if k in BAR_FORMATS else v
            for k, v in metrics.items() if k != "v_num"}


def quiet_lightning() -> None:
    """Drop Lightning's per-run banners (accelerators available, "fit stopped") from plain
    logs and sweeps, where they repeat for every job. They are ``rank_zero_info`` messages; a
    real warning still shows.
    A branch (config/branch.py) starts from its parent's checkpoint, whose checkpoint folder
    is not its own: ModelCheckpoint's notice that it will not reuse it is expected there."""
    logging.getLogger(RANK_ZERO).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r"The dirpath has changed from")


def wants_rich(progress: str, parallel: int = 1) -> bool:
    """``parallel``: the jobs running at once (1 outside a sweep and in a sequential one)."""
    if progress == "rich":
        return True
    return (progress == "auto" and parallel == 1 and sys.stdout.isatty()
            and "CI" not in os.environ)


def progress_callbacks(progress: str, every: int, tokens_per_step: int, val_every: int = 0,
                       position: SweepPosition | None = None) -> list[Callback]:
    rich = wants_rich(progress, position.parallel if position else 1)
    speed = Speedometer(every, tokens_per_step, echo=not rich and progress != "none",
                        val_every=val_every, position=position)
    return [SweepProgressBar(position), speed] if rich else [speed]
