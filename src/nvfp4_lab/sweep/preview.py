"""``nvfp4-lab run ... --dry-run``: the jobs a command would launch, and what they would cost.

The jobs are expanded as Hydra's basic sweeper will expand them (``rundir.sweep_jobs``). Each
job is composed and typed as the task will (``preflight`` has already refused a bad one), and
its wall time is estimated from the timings this machine measured for the same quantizers,
model, batch and threads, for the backend the job will use (``sweep/plan.py``). A
configuration never run here gets a first estimate from the step times shipped for its
machine class, labelled as one; its first run records this machine's own. A job
that the sweep directory (``hydra.sweep.dir=...``, Hydra's default job folders) already holds
finished is listed as done and left out of the total, as the task will skip it. Nothing is
trained or written.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

from .. import rundir
from ..config.job import Job
from ..config.schema import TrainerConfig, apply_arm, plain, register
from ..configs import conf_dir
from ..console import duration
from .plan import SweepPlan, parallel_jobs, plan_job
from .threads import machine_cores


def job_overrides(argv: list[str]) -> tuple[list[list[str]], int, Path | None]:
    """The override list of every job, in launch order, how many run at once, and the sweep
    directory (None: a single run)."""
    overrides = [a for a in argv if not a.startswith("-")]
    cfg = compose("config", overrides=_first_values(overrides), return_hydra_config=True)
    parallel = parallel_jobs(cfg.hydra.launcher)
    multirun = {"-m", "--multirun"} & set(argv) or str(cfg.hydra.mode).endswith("MULTIRUN")
    if not multirun:
        return [overrides], 1, None
    return (rundir.sweep_jobs(cfg.hydra.sweeper.get("params") or {}, overrides), parallel,
            Path(str(cfg.hydra.sweep.dir)))


def finished(sweep: Path | None, num: int, cfg: DictConfig) -> bool:
    """Whether job ``num`` of ``sweep`` is there and done with this config (the task skips it:
    ``rundir.check_can_start``)."""
    found = sorted(sweep.glob(f"{num}_*/seed={cfg.seed}")) if sweep and sweep.is_dir() else []
    if not found:
        return False
    cfg = apply_arm(cfg)
    job = Job.of_arm(cfg)
    try:
        return rundir.check_can_start(found[0], cfg, world=job.trainer.world_size(),
                                      tokens_per_step=job.tokens_per_step) == rundir.Start.done
    except rundir.RunExists:
        return False


def _first_values(overrides: list[str]) -> list[str]:
    parsed = OverridesParser.create().parse_overrides(overrides)
    return [f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}"
            if o.is_sweep_override() else str(o.input_line) for o in parsed]


@dataclass(frozen=True)
class DryRun:
    """What ``--dry-run`` found: its report (one line per job, then the total), the config's
    ``name`` (an ablation's, whose published claims the command line reads beside it) and one
    seed's CPU seconds here (None where not every job has an estimate here)."""

    text: str
    name: str
    seconds_per_seed: float | None


def preview(argv: list[str]) -> DryRun:
    """The dry run of ``argv``: its report and what prices the ablation's claims."""
    register()
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        all_overrides, parallel, sweep = job_overrides(argv)
        cores = machine_cores()
        cfgs = [compose("config", overrides=o) for o in all_overrides]
        jobs = [plan_job(o, c, parallel, cores) for o, c in zip(all_overrides, cfgs)]
        done = {i for i, c in enumerate(cfgs) if finished(sweep, i, c)}
    plan = SweepPlan(tuple(j for i, j in enumerate(jobs) if i not in done), parallel, cores)
    full = SweepPlan(tuple(jobs), parallel, cores)
    names = [_distinct(list(j.overrides), all_overrides) for j in jobs]
    width = max(len(n) for n in [*names, "job"])
    lines = [f"{len(jobs)} job{'s' if len(jobs) != 1 else ''}, {parallel} at a time "
             f"(--dry-run: nothing is run or written)"
             + (f"; {len(done)} already done in {sweep}" if done else ""),
             f"{'#':>3}  {'job':<{width}} {'steps':>6}  estimate"]
    for i, (j, name) in enumerate(zip(jobs, names)):
        est = ("done: skipped" if i in done else
               f"~{duration(j.seconds)} ({j.backend}" + (f"; {j.estimate})" if j.estimate
                                                         else ", measured here)")
               if j.seconds is not None else "never run here: no estimate")
        lines.append(f"{i:>3}  {name:<{width}} {j.steps:>6}  {est}")
    known, total = len(plan.known()), plan.total()
    unknown = len(plan.jobs) - known
    first = sum(bool(j.estimate) for j in plan.known())
    if total is not None:
        lines.append(f"total ~{duration(total)} for {known} of {len(plan.jobs)} jobs to run, "
                     f"{parallel} at a time" + (f"; {unknown} with no estimate" if unknown
                                                else "")
                     + (f"; an estimate: {first} never ran on this machine, counted from the "
                        "step times shipped with the package" if first else ""))
    else:
        lines.append(f"no estimate: none of the {len(plan.jobs)} jobs' configurations has run "
                     f"on this machine")
    return DryRun("\n".join(lines), str(cfgs[0].name), _per_seed(cfgs, full))


def _per_seed(cfgs: list[DictConfig], plan: SweepPlan) -> float | None:
    """One seed's CPU seconds here, when every job has an estimate on this machine (not a
    GPU sweep's)."""
    here = not any(plain(c.trainer, TrainerConfig).gpu for c in cfgs)
    total = plan.total() if here and len(plan.known()) == len(plan.jobs) else None
    return total / len({c.seed for c in cfgs}) if total is not None else None


def _distinct(job: list[str], jobs: list[list[str]]) -> str:
    """The overrides of ``job`` that differ between jobs (all of them for a single run)."""
    varying = [o for o in job if any(o not in other for other in jobs)]
    return ", ".join(varying or job) or "(defaults)"
