"""How many threads a CPU training uses: chosen on purpose, said aloud, and checked against
what else the machine is doing.

Two processes that each use every core run several times slower than one alone: their OpenMP
threads spin against each other (the quickstart took 42 minutes beside another training, 4.5
alone). So ``trainer.threads: 0`` does not just leave torch's default: one job takes the
machine's cores (torch's default count, which is the physical cores or ``OMP_NUM_THREADS``),
and the parallel jobs of a local sweep (``launcher=joblib``, ``hydra.launcher.n_jobs``) or the
processes of a CPU DDP run divide them. A positive ``trainer.threads`` is used as given. The
choice is printed with its reason, and a warning says when the 1-minute load average shows
that other work already holds the cores this run is about to use.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

CORES = torch.get_num_threads()   # torch's default, read before anything here changes it


@dataclass(frozen=True)
class ThreadPlan:
    threads: int
    reason: str
    warning: str | None = None

    def __str__(self) -> str:
        return f"threads: {self.threads} ({self.reason})" + (
            f"\nwarning: {self.warning}" if self.warning else "")


def plan(requested: int, parallel: int, cores: int, load: float) -> ThreadPlan:
    """``requested``: trainer.threads (0: choose); ``parallel``: processes sharing the machine
    in this command (sweep jobs at once x DDP processes); ``cores``: torch's default thread
    count; ``load``: the 1-minute load average before this run started computing."""
    parallel = max(1, parallel)
    if requested:
        threads, reason = requested, "trainer.threads"
    else:
        threads = max(1, cores // parallel)
        reason = f"{cores} core{'s' if cores > 1 else ''}" + (
            f" / {parallel} processes at once" if parallel > 1 else "")
    warning = None
    if load > max(cores - threads, 0) + 0.5:
        warning = (f"load average {load:.1f} on {cores} cores: other processes already use the "
                   f"cores this run's {threads} thread{'s' if threads > 1 else ''} need, so it "
                   "will run slower than alone (see `uptime`; set trainer.threads to share)")
    return ThreadPlan(threads, reason, warning)


def apply(requested: int, parallel: int) -> ThreadPlan:
    """Choose, set torch's thread count, and return the plan (to print)."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    chosen = plan(requested, parallel, CORES, load)
    torch.set_num_threads(chosen.threads)
    return chosen
