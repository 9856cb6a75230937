"""The quantization backend of a run, and everything ``backend=auto`` does to choose it.

One callback owns the choice from start to end: the module it trains only receives a backend
(``LMTask.use_backend``), and the run reads what was used from the callback (``used``):

- **choose** (``setup``, before the model is built): a named backend is resolved and
  self-tested as it is (``quant.resolve``). ``auto`` on CUDA tries triton, then the reference.
  ``auto`` on a CPU asks the machine's timing ledger (``quant/cost.py``, which holds the rule
  and its formulas) which CPU backend finishes the configured steps soonest.
- **probe and switch** (``on_train_batch_end``): with nothing measured for the run, the ledger
  starts it on the reference; ``WARM`` steps later this callback times ``PROBE`` steps, files
  them in the ledger and switches the quantized layers to the compiled backend when that
  finishes the remaining steps sooner. Both backends compute the same bits
  (``quant/backends.py`` self-tests the compiled one first), so the switch changes the wall
  time and nothing else.
- **record** (``record``, called when the run is written up): a finished CPU run files its
  steady ms/step, its start-up and its validation seconds in the ledger, for the next run's
  choice and for ``--dry-run``'s estimates.

Every CPU run is recorded, BF16 too: its step bounds an FP4 run's from below. The choice, its
reason and any switch are printed and end in ``summary.json`` (``reason``).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import lightning as L
import pandas as pd
import torch

from ..console import say
from ..model import ModelConfig
from ..quant import Backend, Recipe, cost, resolve
from ..quant.recipe import NO_BACKEND

WARM, PROBE = 2, 8


@dataclass(frozen=True)
class Used:
    """``summary.json``'s backend (``NO_BACKEND``: nothing quantized; None: none chosen yet)
    when the run ended, and why."""
    backend: str | None
    reason: str | None


class AutoBackend(L.Callback):
    """Chooses, probes, switches and records the backend of one run of ``max_steps`` steps of
    ``tokens_per_step`` tokens of ``recipe`` on ``model``."""

    def __init__(self, recipe: Recipe, model: ModelConfig, tokens_per_step: int,
                 max_steps: int) -> None:
        self.recipe, self.model, self.max_steps = recipe, model, max_steps
        self.tokens_per_step = tokens_per_step
        self.specs = list(recipe.specs)
        self.backend: Backend | None = None      # the one the module quantizes with now
        self.reason: str | None = None           # why auto chose it, and any switch
        self.key: cost.RunKey | None = None      # a CPU run's entry in the ledger
        self.probing = False                     # auto with nothing measured: time, then decide
        self.input_dtypes: tuple[torch.dtype, ...] = ()
        self.start_step = 0                      # global step at this process's first step
        self.train_started = 0.0                 # perf_counter() then
        self.probe_started: float | None = None
        self.validation_seconds: list[float] = []
        self._validation_started: float | None = None

    def setup(self, trainer: L.Trainer, task, stage: str) -> None:
        # here, not in configure_model: Lightning runs that under a torch.device context,
        # which the compiled backend's self-test cannot trace
        if self.backend is not None:          # fit, then validate: chosen once
            return
        device, name = trainer.strategy.root_device, self.recipe.backend
        if device.type == "cpu":
            self.key = cost.run_key(self.specs, self.model, self.tokens_per_step,
                                    torch.get_num_threads())
        choice = cost.pick(name, bool(self.specs), device.type, self.key, self.max_steps)
        if not self.specs:
            self.reason = choice.reason
        elif name == "auto" and device.type == "cpu":
            name, self.reason, self.probing = choice.backend, choice.reason, choice.probe
            say(f"backend auto: {name} ({choice.reason})")
        # full-precision training quantizes fp32 tensors only (no autocast): no bf16 graphs
        fp32_only = str(trainer.precision).startswith("32")
        self.input_dtypes = (torch.float32,) if fp32_only else (torch.float32, torch.bfloat16)
        # the ledger's choice is auto's preference: a compiled backend that fails its
        # self-test here falls back to the reference, as auto does, instead of ending the run
        wanted = "auto" if self.recipe.backend == "auto" and name == "compiled" else name
        self.backend = resolve(wanted, self.specs, device, self.input_dtypes)
        task.use_backend(self.backend)

    def on_train_start(self, trainer: L.Trainer, task) -> None:
        self.start_step, self.train_started = trainer.global_step, time.perf_counter()

    def on_validation_start(self, trainer: L.Trainer, task) -> None:
        if not trainer.sanity_checking:
            self._validation_started = time.perf_counter()

    def on_validation_end(self, trainer: L.Trainer, task) -> None:
        if self._validation_started is not None:
            self.validation_seconds.append(time.perf_counter() - self._validation_started)
            self._validation_started = None

    def on_train_batch_end(self, trainer: L.Trainer, task, outputs, batch, batch_idx) -> None:
        if not self.probing:
            return
        done = trainer.global_step - self.start_step      # optimizer steps this process ran
        if self.probe_started is None and done >= WARM:
            self.probe_started = time.perf_counter()
        elif self.probe_started is not None and done >= WARM + PROBE:
            self.probing = False
            ms = 1000 * (time.perf_counter() - self.probe_started) / (done - WARM)
            startup = self.probe_started - self.train_started - WARM * ms / 1000
            cost.record(self.key, "reference", cost.Timing(round(ms, 1),
                                                           round(max(startup, 0), 1)))
            self._decide(trainer, task, ms)

    def _decide(self, trainer: L.Trainer, task, ms: float) -> None:
        step, left = trainer.global_step, self.max_steps - trainer.global_step
        times = cost.cold_start_times(ms, left)
        timed = (f"timed the reference at {ms:.0f} ms/step over steps {step - PROBE}-{step}: "
                 f"the remaining {left} steps ~{times['reference']:.0f} s, compiled ~"
                 f"{times['compiled']:.0f} s (start-up {cost.cold_compile_s():.0f} s, the "
                 f"longest cold compile measured)")
        if times["compiled"] < times["reference"]:
            backend = resolve("auto", self.specs, trainer.strategy.root_device,
                              self.input_dtypes)     # falls back to the reference if it fails
            if backend.name != "reference":
                self.backend = backend
                task.use_backend(backend)
                timed += f": switched to {backend.name} at step {step}"
        self.reason = f"{self.reason}; {timed}"
        if trainer.is_global_zero:
            say(f"backend auto: {timed}")

    def used(self) -> Used:
        """The backend the run ended with, and why (``summary.json``)."""
        name = self.backend and (self.backend.name if self.specs else NO_BACKEND)
        return Used(name, self.reason)

    def record(self, df: pd.DataFrame, wall: float) -> None:
        """A finished CPU run's timing, into the ledger: its steady ms/step, the median rate of
        the intervals this process logged after its first (which holds any compiling); its
        start-up, the seconds from ``wall`` to its first step plus the first interval's excess
        over that many steady steps; and the median seconds of its validation passes. A pause
        later in the run (a suspended process, a busy core) moves the medians little and the
        start-up not at all."""
        backend = self.used().backend
        if self.key is None or backend not in cost.RECORDED or "tokens_per_second" not in df:
            return
        logged = df[df["step"] > self.start_step].dropna(subset=["tokens_per_second"])
        if len(logged) < 3:
            return
        rates = logged["tokens_per_second"]
        ms = 1000 * self.tokens_per_step / statistics.median(rates.iloc[1:])
        first_steps = int(logged["step"].iloc[0]) - self.start_step
        first_s = first_steps * self.tokens_per_step / rates.iloc[0]
        startup = self.train_started - wall + max(first_s - first_steps * ms / 1000, 0)
        evals = statistics.median(self.validation_seconds) if self.validation_seconds else 0.0
        cost.record(self.key, backend, cost.Timing(round(ms, 1), round(startup, 1),
                                                   round(evals, 2)))
