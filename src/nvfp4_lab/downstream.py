"""``eval.json``: a run's downstream scores, as ``nvfp4-lab eval`` writes them (``harness/``)
and the sweep's report reads them (``analysis/reports/downstream.py``). No torch, no lm-eval.

    {"quantized": {"hellaswag": {"acc": 0.26, "acc_stderr": 0.004, "acc_norm": 0.25,
                                 "acc_norm_stderr": 0.004, "n": 10042, "chance": 0.25,
                                 "limit": null, "step": 4000, "lm_eval": "0.4.13"}, ...},
     "bf16": {...}}

One entry per forward pass (``Forward``) and task. ``chance`` is the accuracy of guessing:
the mean over the scored documents of 1 / their number of choices (null for a task that is
not multiple choice); ``step`` the checkpoint's optimizer steps, so a score of an earlier
checkpoint of a run trained on is not taken for the run's.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import os
from dataclasses import dataclass
from pathlib import Path

EVAL = "eval.json"


class Forward(enum.StrEnum):
    """The forward pass a run is scored with: its recipe's quantization as trained, or the
    same weights unquantized (the run's high-precision arithmetic, what a BF16 recipe does)."""

    quantized = "quantized"
    bf16 = "bf16"


@dataclass(frozen=True)
class TaskScore:
    """One task's result on one run: accuracy (and its length-normalised form where the task
    gives one), their standard errors as lm-eval computes them, documents scored."""

    acc: float
    acc_stderr: float | None
    n: int
    step: int
    lm_eval: str
    acc_norm: float | None = None
    acc_norm_stderr: float | None = None
    chance: float | None = None
    limit: float | None = None


@dataclass(frozen=True)
class Evaluations:
    """All of a run's ``eval.json``: forward -> task -> score."""

    scores: dict[Forward, dict[str, TaskScore]] = dataclasses.field(default_factory=dict)

    @classmethod
    def read(cls, run: Path) -> Evaluations:
        """The run's scores; none when it has no ``eval.json``."""
        path = Path(run) / EVAL
        if not path.exists():
            return cls()
        raw = json.loads(path.read_text())
        return cls({Forward(f): {task: TaskScore(**s) for task, s in tasks.items()}
                    for f, tasks in raw.items()})

    def of(self, forward: Forward) -> dict[str, TaskScore]:
        return self.scores.get(forward, {})

    def with_scores(self, forward: Forward, new: dict[str, TaskScore]) -> Evaluations:
        """These scores with ``new`` added (replacing the same tasks')."""
        return Evaluations({**self.scores, forward: {**self.of(forward), **new}})

    def write(self, run: Path) -> None:
        """Atomically: a reader never sees half a file."""
        record = {f.value: {t: dataclasses.asdict(s) for t, s in tasks.items()}
                  for f, tasks in self.scores.items()}
        tmp = Path(run) / f"{EVAL}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(record, indent=2) + "\n")
        tmp.replace(Path(run) / EVAL)
