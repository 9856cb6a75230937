"""How many threads a CPU training uses: chosen on purpose, said aloud, and checked against
what else the machine is doing.

Two processes that each use every core run several times slower than one alone: their OpenMP
threads spin against each other (the quickstart took 42 minutes beside another training, 4.5
alone). So ``trainer.threads: 0`` does not just leave torch's default: one job takes the
machine's cores (torch's default count, which is the physical cores or ``OMP_NUM_THREADS``),
and the parallel jobs of a local sweep (``launcher=joblib``, ``hydra.launcher.n_jobs``) or the
processes of a CPU DDP run divide them. A positive ``trainer.threads`` is used as given. The
choice is printed with its reason, and a warning says when other processes are running right
now (``/proc/loadavg``'s runnable count, less this command's own jobs) on the cores this run is
about to use. The core count is torch's default in the launching process: a sweep's worker
processes may start with their thread pools already capped, so the sweep's plan carries it to
them (``sweep/plan.py``).
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import torch


@functools.cache
def machine_cores() -> int:
    """torch's default thread count in this process, read once, before ``apply`` changes it."""
    return torch.get_num_threads()


@dataclass(frozen=True)
class ThreadPlan:
    threads: int
    reason: str
    warning: str | None = None

    def __str__(self) -> str:
        return f"threads: {self.threads} ({self.reason})" + (
            f"\nwarning: {self.warning}" if self.warning else "")


def plan(requested: int, parallel: int, cores: int, busy: float) -> ThreadPlan:
    """``requested``: trainer.threads (0: choose); ``parallel``: processes of this command
    sharing the machine (sweep jobs at once x DDP processes); ``cores``: torch's default
    thread count; ``busy``: other processes running now, this command's own excluded."""
    parallel = max(1, parallel)
    if requested:
        threads, reason = requested, "trainer.threads"
    else:
        threads = max(1, cores // parallel)
        reason = f"{_cores(cores)}" + (f" / {parallel} processes at once" if parallel > 1
                                       else "")
    warning = None
    if busy > max(cores - threads * parallel, 0) + 0.5:
        warning = (f"{busy:.0f} other process{'es' if busy >= 1.5 else ''} running on "
                   f"{_cores(cores)}: they hold cores this run's {threads} "
                   f"thread{'s' if threads > 1 else ''} need, so it will run slower than alone "
                   "(see `uptime`; set trainer.threads to share)")
    return ThreadPlan(threads, reason, warning)


def _cores(n: int) -> str:
    return f"{n} core{'s' if n != 1 else ''}"


def running_others(parallel: int) -> float:
    """Processes running now besides this one and its ``parallel - 1`` siblings: Linux's
    instantaneous runnable count, else the 1-minute load average (which lags)."""
    try:
        runnable = float(Path("/proc/loadavg").read_text().split()[3].split("/")[0]) - 1
    except (OSError, IndexError, ValueError):
        runnable = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return max(0.0, runnable - (parallel - 1))


def apply(requested: int, parallel: int, cores: int | None = None) -> ThreadPlan:
    """Choose, set torch's thread count, and return the plan (to print); ``cores``: the
    launching process's (a sweep's plan), else this one's."""
    chosen = plan(requested, parallel, cores or machine_cores(), running_others(parallel))
    torch.set_num_threads(chosen.threads)
    return chosen
