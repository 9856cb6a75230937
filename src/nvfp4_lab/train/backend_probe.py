"""``backend=auto`` on a CPU with nothing measured: time the reference, then compile if it pays.

``quant.cost`` picks the backend that finishes a run soonest from the timings this machine
measured. The first run of a recipe on a fresh machine has none, nor a BF16 step of the same
model and batch to bound one, so it starts on the eager reference (nothing to compile) and
this callback times it: ``WARM`` steps first (allocation, first-touch caches), then ``PROBE``
steps. If the remaining steps at that pace would take longer than compiling
(``cost.COLD_COMPILE_S``) plus the same steps at the compiled pace (``cost.COMPILED_STEP_RATIO``
of the reference's), the quantized layers switch to the compiled backend for the rest of the
run. The two backends compute the same bits (``quant/backends.py`` self-tests the compiled one
against the reference before it is used), so the switch changes the run's wall time and
nothing else. The README's first command on a fresh machine is such a run: two FP4 jobs that
start together, before any BF16 step was measured.

The probe's reference timing goes into the machine's ledger, as a finished run's would; the
run's own timing, filed when it ends, is the compiled backend's (its start-up then holds the
probe and the compile, a cold start's cost).
"""
from __future__ import annotations

import time

import lightning as L

from ..quant import cost, resolve
from .console import say

WARM, PROBE = 2, 8


class BackendProbe(L.Callback):
    """Times ``PROBE`` reference steps of a task whose ``probe_backend`` is set, then switches
    it to the compiled backend when that finishes the run sooner."""

    def __init__(self) -> None:
        self.fit_start: float | None = None
        self.probe_start: float | None = None

    def on_train_start(self, trainer: L.Trainer, task) -> None:
        self.fit_start = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, task, outputs, batch, batch_idx) -> None:
        if not task.probe_backend:
            return
        done = trainer.global_step - task.start_step      # optimizer steps this process ran
        if self.probe_start is None and done >= WARM:
            self.probe_start = time.perf_counter()
        elif self.probe_start is not None and done >= WARM + PROBE:
            task.probe_backend = False
            ms = 1000 * (time.perf_counter() - self.probe_start) / (done - WARM)
            startup = self.probe_start - self.fit_start - WARM * ms / 1000
            cost.record(task.cost_key, "reference", cost.Timing(round(ms, 1),
                                                                round(max(startup, 0), 1)))
            self._decide(trainer, task, ms)

    def _decide(self, trainer: L.Trainer, task, ms: float) -> None:
        step, left = trainer.global_step, task.max_steps - trainer.global_step
        times = cost.cold_start_times(ms, left)
        timed = (f"timed the reference at {ms:.0f} ms/step over steps {step - PROBE}-{step}: "
                 f"the remaining {left} steps ~{times['reference']:.0f} s, compiled ~"
                 f"{times['compiled']:.0f} s (start-up {cost.COLD_COMPILE_S:.0f} s)")
        if times["compiled"] < times["reference"]:
            backend = resolve("auto", task.quant_specs, trainer.strategy.root_device,
                              task.input_dtypes)       # falls back to the reference if it fails
            if backend.name != "reference":
                task.use_backend(backend)
                timed += f": switched to {backend.name} at step {step}"
        task.backend_reason += f"; {timed}"
        if trainer.is_global_zero:
            say(f"backend auto: {timed}")
