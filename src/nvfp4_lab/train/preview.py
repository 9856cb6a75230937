"""``nvfp4-lab run ... --dry-run``: the jobs a command would launch, and what they would cost.

The jobs are expanded as Hydra's basic sweeper will expand them (its own ``split_arguments``):
the ablation's ``hydra.sweeper.params`` first, then the command line's overrides, a key given in
both taking the command line's values, the last key varying fastest. Each job is composed and
typed as the task will (``preflight`` has already refused a bad one), and its wall time is
estimated from the step times this machine measured for the same quantizers, model, batch and
threads (``quant/cost.py``: every finished CPU run files its own), for the backend the job
will use (``auto``: the faster). A configuration never run here is counted, not guessed: run
one job of it to calibrate. Nothing is trained or written.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper  # its expansion, exactly
from hydra.core.override_parser.overrides_parser import OverridesParser

from ..configs import conf_dir
from ..data import DataConfig
from ..model import ModelConfig
from ..quant import cost, operand_plan
from . import branch
from .console import duration
from .schema import TrainConfig, TrainerConfig, apply_arm, plain, recipe_of, register


@dataclass(frozen=True)
class Job:
    """One job of the command: its overrides, the ones that tell it apart, its length and
    estimated seconds (None: this configuration was never measured on this machine)."""

    number: int
    overrides: list[str]
    distinct: str
    steps: int
    seconds: float | None
    backend: str


def job_overrides(argv: list[str]) -> tuple[list[list[str]], int]:
    """The override list of every job, in launch order, and how many run at once."""
    overrides = [a for a in argv if not a.startswith("-")]
    cfg = compose("config", overrides=_first_values(overrides), return_hydra_config=True)
    launcher = cfg.hydra.launcher
    parallel = int(launcher.get("n_jobs") or 1) if "joblib" in str(launcher.get("_target_")) \
        else 1
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


def estimate(overrides: list[str]) -> tuple[int, float | None, str]:
    """(steps, seconds or None, backend) of one job."""
    cfg = apply_arm(compose("config", overrides=overrides))
    recipe = recipe_of(cfg.quant)
    model, data = plain(cfg.model, ModelConfig), plain(cfg.data, DataConfig)
    t, tr = plain(cfg.train, TrainConfig), plain(cfg.trainer, TrainerConfig)
    if model.vocab_size == 0:     # as the data module will set it
        model.vocab_size = 256 if data.tokenizer == "bytes" else data.vocab_size
    tokens_per_step = t.batch_size * t.seq_len * t.accumulate * tr.world_size()
    steps = t.run_length(tokens_per_step)
    steps -= branch.branch_step(cfg, steps) or 0   # a branch trains its tail only
    specs = [o.spec for o in operand_plan(recipe).values() if o.spec]
    key = cost.run_key(specs, model, tokens_per_step, tr.threads or torch.get_num_threads())
    times = cost.finish_times(key, steps)
    if times is None:
        return steps, None, recipe.backend
    backend = min(times, key=times.get) if recipe.backend == "auto" else recipe.backend
    return steps, times.get(backend, min(times.values())), backend


def preview(argv: list[str]) -> str:
    """The dry-run report: one line per job, then the total."""
    register()
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        all_overrides, parallel = job_overrides(argv)
        jobs = []
        for i, job in enumerate(all_overrides):
            steps, seconds, backend = estimate(job)
            jobs.append(Job(i, job, _distinct(job, all_overrides), steps, seconds, backend))
    lines = [f"{len(jobs)} job{'s' if len(jobs) != 1 else ''}, {parallel} at a time "
             f"(--dry-run: nothing is run or written)",
             f"{'#':>3}  {'job':<44} {'steps':>6}  estimate"]
    for j in jobs:
        est = (f"{duration(j.seconds)} ({j.backend})" if j.seconds is not None
               else "never run here: no estimate")
        lines.append(f"{j.number:>3}  {j.distinct:<44} {j.steps:>6}  {est}")
    known = [j.seconds for j in jobs if j.seconds is not None]
    unknown = len(jobs) - len(known)
    if known:
        lines.append(f"total ~{duration(sum(known) / parallel)} for {len(known)} of "
                     f"{len(jobs)} jobs" + (f"; {unknown} with a configuration never run on "
                                            f"this machine" if unknown else ""))
    else:
        lines.append(f"no estimate: none of the {len(jobs)} jobs' configurations has run on "
                     f"this machine")
    return "\n".join(lines + _plan(all_overrides, jobs, parallel))


def _plan(all_overrides: list[list[str]], jobs: list[Job], parallel: int) -> list[str]:
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
    known = [j.seconds for j in jobs if j.seconds is not None]
    per_seed = sum(known) / len(seeds) / parallel if len(known) == len(jobs) else None
    return plan_lines(paper, shipped(), per_seed)


def _distinct(job: list[str], jobs: list[list[str]]) -> str:
    """The overrides of ``job`` that differ between jobs (all of them for a single run)."""
    varying = [o for o in job if any(o not in other for other in jobs)]
    return ", ".join(varying or job) or "(defaults)"
