"""``nvfp4-lab eval PATH... tasks=a,b [limit=N] [forward=quantized|bf16] [batch_size=N]
[include=DIR] [--overwrite]``: score each finished run at or under PATH (a run or a sweep
directory) on lm-eval tasks through the harness's own ``simple_evaluate`` and the ``nvfp4-lab``
model (``lm.py``), and add the scores to the run's ``eval.json`` (``downstream.py``).

A task already scored on the run's checkpoint with the same forward pass is kept, not scored
again, unless ``--overwrite``. ``include=DIR``: task YAMLs of your own beside the harness's
(``TaskManager(include_path=DIR)``). A user's mistake (an unknown key or task, a generation
task, no finished run, a run without its checkpoint, the extra not installed) is one line and
exit status 2, before that run's file is touched.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import rundir
from ..analysis.sources.collect import find_runs
from ..downstream import Evaluations, Forward, TaskScore
from .checkpoint import CHECKPOINT, EvalRefused

KEYS = ("tasks", "limit", "forward", "batch_size", "include")
EXTRA = "lm-eval is not installed: pip install 'nvfp4-lab[eval]'"


@dataclass(frozen=True)
class EvalArgs:
    """The command line, checked."""

    paths: list[Path]
    tasks: list[str]
    forward: Forward = Forward.quantized
    limit: float | None = None
    batch_size: int = 1
    include: Path | None = None
    overwrite: bool = False

    @classmethod
    def parse(cls, argv: list[str]) -> EvalArgs:
        # a run directory of a sweep has "=" in its name (seed=0): an existing path is a path
        keyed = [a for a in argv if "=" in a and not Path(a).exists()]
        pairs = dict(a.split("=", 1) for a in keyed)
        paths = [Path(a) for a in argv if a not in keyed and not a.startswith("--")]
        flags = {a for a in argv if a.startswith("--")} - {"--overwrite"}
        if bad := flags or set(pairs) - set(KEYS):
            raise EvalRefused(f"eval: unknown argument {sorted(bad)[0]!r}; keys: "
                              f"{', '.join(KEYS)}, flag --overwrite")
        if not paths or not pairs.get("tasks"):
            raise EvalRefused("eval: give run or sweep directories and tasks=NAME[,NAME...]")
        try:
            return cls(paths, pairs["tasks"].split(","),
                       Forward(pairs.get("forward", Forward.quantized)),
                       float(pairs["limit"]) if "limit" in pairs else None,
                       int(pairs.get("batch_size", 1)),
                       Path(pairs["include"]) if "include" in pairs else None,
                       "--overwrite" in argv)
        except ValueError as err:
            raise EvalRefused(f"eval: {err} (forward: quantized | bf16; limit, batch_size: "
                              "numbers)") from None


def evaluate(argv: list[str]) -> int:
    """The subcommand: 0, or 2 with one line for a user's mistake."""
    try:
        args = EvalArgs.parse(argv)
        if importlib.util.find_spec("lm_eval") is None:
            raise EvalRefused(EXTRA)
        runs = finished_runs(args.paths)
        from lm_eval.tasks import TaskManager

        manager = TaskManager(include_path=args.include)
        check_tasks(manager, args.tasks)
        for run in runs:
            print(score_run(run, args, manager))
    except (EvalRefused, FileNotFoundError) as err:
        print(f"nvfp4-lab: {err}", file=sys.stderr)
        return 2
    return 0


def finished_runs(paths: list[Path]) -> list[Path]:
    """The runs at or under ``paths`` whose summary says done, each with its checkpoint."""
    runs = []
    for run in find_runs(paths):
        summary = rundir.Summary.read(run)
        if summary is None or summary.status != rundir.Status.done:
            print(f"skipped {run}: not a finished run")
        elif not (run / CHECKPOINT).exists():
            raise EvalRefused(f"{run}: finished but has no {CHECKPOINT} to evaluate")
        else:
            runs.append(run)
    if not runs:
        raise EvalRefused(f"no finished run under {', '.join(map(str, paths))}")
    return runs


def check_tasks(manager, tasks: list[str]) -> None:
    """Every task known to the harness (or ``include=``) and scored by log-likelihood."""
    from .lm import GENERATION

    for task in tasks:
        entry = manager.task_index.get(task)
        if entry is None:
            raise EvalRefused(f"tasks={task!r}: lm-eval knows no such task (or group); "
                              "`lm-eval ls tasks` lists them, include=DIR adds your own")
        if (entry.cfg or {}).get("output_type") == "generate_until":
            raise EvalRefused(f"tasks={task!r}: {GENERATION}")


def score_run(run: Path, args: EvalArgs, manager) -> str:
    """Score ``run`` on the tasks it lacks (all with ``--overwrite``); one line saying what."""
    from lm_eval import simple_evaluate

    from . import lm  # noqa: F401  registers the model "nvfp4-lab"

    done = Evaluations.read(run)
    step = rundir.Summary.read(run).steps
    todo = [t for t in args.tasks if args.overwrite
            or getattr(done.of(args.forward).get(t), "step", None) != step]
    if not todo:
        return f"{run}: {', '.join(args.tasks)} already scored ({args.forward}); --overwrite"
    try:
        results = simple_evaluate(
            model="nvfp4-lab", model_args={"run": str(run), "forward": args.forward.value},
            tasks=todo, limit=args.limit, batch_size=args.batch_size, task_manager=manager,
            log_samples=True)
    except NotImplementedError as err:
        raise EvalRefused(f"tasks={','.join(todo)}: {err}") from None
    new = scores(results, step, args.limit)
    done.with_scores(args.forward, new).write(run)
    return f"{run}: " + "; ".join(f"{t} acc {s.acc:.4f}" + (
        f" (chance {s.chance:.4f})" if s.chance is not None else "") for t, s in new.items())


def scores(results: dict, step: int, limit: float | None) -> dict[str, TaskScore]:
    """Each scored task's accuracy from ``simple_evaluate``'s results (logged samples on)."""
    version = importlib.metadata.version("lm_eval")
    out = {}
    for task, counts in results["n-samples"].items():
        r = results["results"][task]
        if "acc,none" not in r:
            continue
        out[task] = TaskScore(
            acc=r["acc,none"], acc_stderr=_number(r.get("acc_stderr,none")),
            n=counts["effective"], step=step, lm_eval=version,
            acc_norm=_number(r.get("acc_norm,none")),
            acc_norm_stderr=_number(r.get("acc_norm_stderr,none")),
            chance=chance(results, task), limit=limit)
    return out


def chance(results: dict, task: str) -> float | None:
    """Guessing's accuracy on a multiple-choice task: the mean of 1 / choices over its
    scored documents (None for other tasks)."""
    if results["configs"][task].get("output_type") != "multiple_choice":
        return None
    samples = results["samples"][task]
    return sum(1 / len(s["arguments"]) for s in samples) / len(samples)


def _number(value) -> float | None:
    """A metric as a float; None where the harness has none ("N/A")."""
    return float(value) if isinstance(value, int | float) else None
