"""``nvfp4-lab run ... --dry-run``: the jobs a command would launch, and what they would cost.

The jobs are expanded as Hydra's basic sweeper will expand them (its own ``split_arguments``):
the ablation's ``hydra.sweeper.params`` first, then the command line's overrides, a key given in
both taking the command line's values, the last key varying fastest. Each job is composed and
typed as the task will (``preflight`` has already refused a bad one), and its wall time is
estimated from the timings this machine measured for the same quantizers, model, batch and
threads, for the backend the job will use (``train/sweep_plan.py``). A configuration never run
here is counted, not guessed: run one job of it to calibrate. Nothing is trained or written.
"""
from __future__ import annotations

from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper  # its expansion, exactly
from hydra.core.override_parser.overrides_parser import OverridesParser

from ..configs import conf_dir
from .console import duration
from .schema import register
from .sweep_plan import SweepPlan, parallel_jobs, plan_job
from .threads import machine_cores


def job_overrides(argv: list[str]) -> tuple[list[list[str]], int]:
    """The override list of every job, in launch order, and how many run at once."""
    overrides = [a for a in argv if not a.startswith("-")]
    cfg = compose("config", overrides=_first_values(overrides), return_hydra_config=True)
    parallel = parallel_jobs(cfg.hydra.launcher)
    multirun = {"-m", "--multirun"} & set(argv) or str(cfg.hydra.mode).endswith("MULTIRUN")
    if not multirun:
        return [overrides], 1
    return expand(cfg.hydra.sweeper.get("params") or {}, overrides), parallel


def expand(params, overrides: list[str]) -> list[list[str]]:
    """The jobs of a sweep from its sweeper ``params`` (key: values) and command line."""
    parsed = OverridesParser.create().parse_overrides(
        [f"{k}={v}" for k, v in params.items()] + list(overrides))
    return BasicSweeper.split_arguments(parsed, None)[0]


def _first_values(overrides: list[str]) -> list[str]:
    parsed = OverridesParser.create().parse_overrides(overrides)
    return [f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}"
            if o.is_sweep_override() else o.input_line for o in parsed]


def preview(argv: list[str]) -> str:
    """The dry-run report: one line per job, then the total."""
    register()
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        all_overrides, parallel = job_overrides(argv)
        cores = machine_cores()
        plan = SweepPlan(tuple(plan_job(o, compose("config", overrides=o), parallel, cores)
                               for o in all_overrides), parallel, cores)
    lines = [f"{len(plan.jobs)} job{'s' if len(plan.jobs) != 1 else ''}, {parallel} at a time "
             f"(--dry-run: nothing is run or written)",
             f"{'#':>3}  {'job':<44} {'steps':>6}  estimate"]
    for i, j in enumerate(plan.jobs):
        est = (f"{duration(j.seconds)} ({j.backend})" if j.seconds is not None
               else "never run here: no estimate")
        lines.append(f"{i:>3}  {_distinct(list(j.overrides), all_overrides):<44} "
                     f"{j.steps:>6}  {est}")
    known, total = len(plan.known()), plan.total()
    unknown = len(plan.jobs) - known
    if total is not None:
        lines.append(f"total ~{duration(total)} for {known} of {len(plan.jobs)} jobs, "
                     f"{parallel} at a time" + (f"; {unknown} with a configuration never run "
                                                f"on this machine" if unknown else ""))
    else:
        lines.append(f"no estimate: none of the {len(plan.jobs)} jobs' configurations has run "
                     f"on this machine")
    return "\n".join(lines + _plan(all_overrides, plan))


def _plan(all_overrides: list[list[str]], plan: SweepPlan) -> list[str]:
    """What the published results say this ablation's claims need (analysis.context)."""
    from ..analysis.context import plan_lines, shipped
    from ..analysis.paper import load_paper

    register()
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        cfg = compose("config", overrides=all_overrides[0])
        seeds = {compose("config", overrides=o).seed for o in all_overrides}
    paper = load_paper(str(cfg.name))
    if paper is None:
        return []
    total = plan.total() if len(plan.known()) == len(plan.jobs) else None
    per_seed = total / len(seeds) if total is not None else None
    return plan_lines(paper, shipped(), per_seed)


def _distinct(job: list[str], jobs: list[list[str]]) -> str:
    """The overrides of ``job`` that differ between jobs (all of them for a single run)."""
    varying = [o for o in job if any(o not in other for other in jobs)]
    return ", ".join(varying or job) or "(defaults)"
