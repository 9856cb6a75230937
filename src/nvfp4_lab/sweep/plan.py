"""A sweep's plan: its jobs in launch order, how many run at once, and what each should cost.

``--dry-run`` prints it. When a multirun starts, the sweep callback writes it to the sweep
directory (``sweep_plan.json``) and every job reads it there: its place in the sweep, the
cores the launching process saw (a joblib worker may start with its thread pool capped), and
the time the sweep has left. A job's cost comes from the timings this machine measured for
its recipe, model, batch and threads (``quant/cost.py``), on the backend it will use:

    seconds = start-up + steps x ms/step + validations x s/validation

and the sweep's remainder lays the later jobs out on the ``parallel`` slots as the launcher
takes them, in launch order, each on the slot that frees first (``makespan``). A job never
measured here gets a first estimate from the step times shipped with the package for its
machine class (``cost.first_estimate``), labelled as such; one with no shipped row either
has none, and the running job counts it at its own length. A GPU job's time is extrapolated
from the GPU rows of the same table (``quant/gpu_time.py``), labelled as an extrapolation.
The progress line marks a sweep figure that holds either with ``?``.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from omegaconf import DictConfig

from ..config.job import Job
from ..quant import cost, gpu_time
from ..quant.recipe import NO_BACKEND
from . import threads
from .machine import Machine

FILE = "sweep_plan.json"


@dataclass(frozen=True)
class PlannedJob:
    """One job: its overrides, steps to train, estimated seconds (None: no estimate), the
    backend it will use and, for a first estimate, what it comes from ("": measured here)."""

    overrides: tuple[str, ...]
    steps: int
    seconds: float | None
    backend: str
    estimate: str = ""


@dataclass(frozen=True)
class SweepPlan:
    jobs: tuple[PlannedJob, ...]
    parallel: int
    cores: int

    def save(self, sweep_dir: Path) -> None:
        Path(sweep_dir).mkdir(parents=True, exist_ok=True)
        (Path(sweep_dir) / FILE).write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, sweep_dir: Path) -> SweepPlan | None:
        try:
            raw = json.loads((Path(sweep_dir) / FILE).read_text())
        except (OSError, ValueError):
            return None
        jobs = tuple(PlannedJob(**{**j, "overrides": tuple(j["overrides"])})
                     for j in raw["jobs"])
        return cls(jobs, raw["parallel"], raw["cores"])

    def known(self) -> list[PlannedJob]:
        return [j for j in self.jobs if j.seconds is not None]

    def total(self) -> float | None:
        """The sweep's wall seconds, from the jobs with an estimate; None if none has one."""
        known = self.known()
        return makespan([j.seconds for j in known if j.seconds is not None],
                        self.parallel) if known else None

    def left_after(self, job: int, job_left: float, job_seconds: float) -> tuple[float, bool]:
        """Seconds until the sweep ends when job ``job`` ends in ``job_left`` and takes
        ``job_seconds`` in all; whether a later job was guessed (at that length, or from the
        shipped step times)."""
        later = self.jobs[job + 1:]
        seconds = [j.seconds if j.seconds is not None else job_seconds for j in later]
        return (makespan(seconds, self.parallel, job_left),
                any(j.seconds is None or j.estimate for j in later))


def parallel_jobs(launcher: DictConfig) -> int:
    """Jobs the sweep's launcher runs at once: joblib's ``n_jobs`` (-1: one per core, -2: all
    cores but one, ...), else 1."""
    if "joblib" not in str(launcher.get("_target_")):
        return 1
    n = int(launcher.get("n_jobs") or 1)
    return n if n > 0 else max(1, (os.cpu_count() or 1) + 1 + n)


def makespan(seconds: list[float], parallel: int, free_at: float = 0.0) -> float:
    """When the last of ``seconds`` ends, each taken in order by the first of ``parallel``
    slots to free, all free at ``free_at``."""
    slots = [free_at] * max(1, parallel)
    for s in seconds:
        slots[slots.index(min(slots))] += s
    return max(slots)


def validations(steps: int, val_every: int) -> int:
    """Validation passes of a run: every ``val_every`` steps and at its last step."""
    return -(-steps // val_every) if val_every > 0 else 0


def plan_job(overrides: list[str], cfg: DictConfig, parallel: int, cores: int) -> PlannedJob:
    """A composed job's length, backend and estimated seconds on this machine, where
    ``parallel`` jobs share ``cores``: from this machine's timings, else a first estimate; a
    GPU job's, extrapolated from the GPU step times shipped (``_on_gpu``)."""
    job = Job.resolve(cfg)
    if job.trainer.gpu:
        return _on_gpu(overrides, job)
    recipe, steps, model = job.recipe, job.steps_here, job.sized_model()
    n_threads = threads.plan(job.trainer.threads, parallel, cores, busy=0.0).threads
    key = cost.run_key(list(job.recipe.specs), model, job.tokens_per_step, n_threads)
    evals = validations(steps, job.train.val_every)
    backend = cost.pick(recipe.backend, bool(job.recipe.specs), "cpu", key, steps).backend
    seconds = (cost.bf16_seconds(key, steps, evals) if backend == NO_BACKEND
               else cost.run_seconds(key, steps, evals, backend))
    if seconds is not None:
        return PlannedJob(tuple(overrides), steps, seconds, backend)
    shape = cost.Shape(str(Machine.here().cls), recipe.format,
                       cost.work_per_token(model.d_model, model.n_layers, model.vocab_size),
                       job.tokens_per_step, n_threads)
    first = cost.first_estimate(shape, steps, recipe.backend)
    if first is None:
        return PlannedJob(tuple(overrides), steps, None, recipe.backend)
    return PlannedJob(tuple(overrides), steps, first.seconds, first.backend, first.label())


def _on_gpu(overrides: list[str], job: Job) -> PlannedJob:
    """A GPU job, from the GPU step times shipped with the package (this machine's ledger
    holds CPU runs only): extrapolated to its model and batch (``quant/gpu_time.py``), for
    the class of this machine's GPU where the table has it."""
    import torch

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    t = job.train
    backend = cost.pick(job.recipe.backend, bool(job.recipe.specs), "cuda", None,
                        job.steps_here).backend
    est = gpu_time.estimate(job.sized_model(), job.recipe.format, t.seq_len,
                            t.tokens_per_step(1), job.steps_here, gpu)
    if est is None:
        return PlannedJob(tuple(overrides), job.steps_here, None, backend)
    return PlannedJob(tuple(overrides), job.steps_here, est.seconds, backend, est.label())
