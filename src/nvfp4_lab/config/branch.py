"""Branching: an arm that continues another arm's run from its switch step (the paper's E04).

The paper's precision-switch arms branch from the running NVFP4 job at the switch, so each
shares its prefix bit for bit and only the tail is trained again. An arm with
``branch_from: P`` (``conf/ablation/precision_switch_v2.yaml``) does the same within a sweep:

    parent (arm P)            trains steps 0..max_steps like any run, and also writes
                              checkpoints/branch/step=N.ckpt for each step N at which an arm
                              of its ablation branches from it (``save_steps``)
    branch (branch_from: P)   N is its own switch step (``quant.switch``). It finds the
                              finished run of arm P with the same config in its sweep (config
                              hash), fits from that checkpoint, trains steps N.. with its own
                              recipe; its metrics.csv holds P's rows up to step N, then its own

So the prefix is the parent's whatever the branch's recipe changes (the backward-only arm
also changes the weight blocks, from the branch on), and a branch costs only its tail. A
branch whose recipe equals the parent's before N ends bit-equal to the same arm trained from
step 0 (tests/unit/config/test_branch.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from omegaconf import DictConfig, OmegaConf

if TYPE_CHECKING:
    import pandas as pd

from ..quant.recipe import Switch
from .schema import Refused, TrainerConfig, apply_arm, plain, switch_of


@dataclass(frozen=True)
class Branch:
    """The parent run a branch continues, and the step it continues from."""

    parent: Path
    step: int
    job: str        # the parent's directory within the sweep, as summary.json records it

    @property
    def checkpoint(self) -> Path:
        return checkpoint_path(self.parent, self.step)

    def prefix(self) -> pd.DataFrame:
        """The parent's metrics of steps up to the branch (a DataFrame): the branch's own
        first rows. pandas and ``rundir`` load here and in ``find``, not with the
        module: the command-line check imports it for ``branch_step`` alone."""
        import pandas as pd

        df = pd.read_csv(self.parent / "metrics.csv")
        return df[df["step"] <= self.step]

    def record(self) -> dict[str, Any]:
        """What the branch's summary.json says of it."""
        return {"job": self.job, "step": self.step}


def checkpoint_path(run: Path, step: int) -> Path:
    return Path(run) / "checkpoints" / "branch" / f"step={step}.ckpt"


def _as_arm(raw: DictConfig, arm: str) -> DictConfig:
    return apply_arm(cast(DictConfig, OmegaConf.merge(raw, {"arm": arm})))


def branch_step(cfg: DictConfig, switch: Switch, max_steps: int) -> int | None:
    """The step an arm-applied config with its recipe's ``switch`` branches at, or None: no
    branch."""
    parent = cfg.get("branch_from")
    if parent is None:
        return None
    if parent not in cfg.arms or parent == cfg.arm:
        raise Refused(f"branch_from={parent!r} must name another arm of the ablation "
                         f"({', '.join(a for a in cfg.arms if a != cfg.arm) or 'none'})")
    step = switch.step(max_steps)
    if step is None:
        raise Refused(f"branch_from={parent!r}: a branch starts at its quant.switch step, "
                         f"and arm {cfg.arm!r} has none; set quant.switch.at_step or "
                         f"quant.switch.at_fraction in the arm, or remove its branch_from")
    if not 0 < step < max_steps:
        raise Refused(f"branch_from={parent!r}: the switch step {step} leaves nothing to "
                         f"branch (a run of {max_steps} steps); remove the arm's branch_from")
    return step


def save_steps(raw: DictConfig, max_steps: int) -> list[int]:
    """The steps at which the arms of ``raw``'s ablation branch from its own arm."""
    if raw.get("arm") is None:
        return []
    children = [a for a, changes in raw.arms.items()
                if (changes or {}).get("branch_from") == raw.arm]
    steps = {switch_of(_as_arm(raw, a).quant).step(max_steps) for a in children}
    return sorted(s for s in steps if s is not None and 0 < s < max_steps)  # the rest refuse


def find(raw: DictConfig, cfg: DictConfig, sweep: Path | None, step: int | None,
         max_steps: int) -> Branch | None:
    """The parent run that ``cfg`` (``raw`` with its arm applied) continues from ``step``
    (``Job.branch_step``), or None."""
    from .. import rundir

    if step is None:
        return None
    parent = cfg.branch_from
    if sweep is None:
        raise Refused(f"branch_from={parent!r}: a branch continues arm {parent!r}'s run "
                         f"in the same sweep; run the ablation as a sweep")
    parent_cfg = _as_arm(raw, parent)
    want = rundir.config_hash(parent_cfg,
                              world=plain(parent_cfg.trainer, TrainerConfig).world_size())
    for path in sorted(Path(sweep).rglob(rundir.SUMMARY)):
        s = rundir.Summary.read(path.parent)
        if s is not None and s.config_hash == want and s.status == rundir.Status.done:
            if s.max_steps != max_steps:
                raise Refused(f"branch_from={parent!r}: arm {parent!r} ran "
                                 f"{s.max_steps} steps and this arm {max_steps}; a "
                                 f"branch keeps its parent's run length")
            if checkpoint_path(path.parent, step).exists():
                return Branch(path.parent, step, str(path.parent.relative_to(sweep)))
    raise Refused(f"branch_from={parent!r}: {sweep} holds no finished run of arm {parent!r} "
                     f"(config hash {want}) with a checkpoint of step {step}; the sweep must "
                     f"run arm {parent!r} first, one job at a time (launcher=basic)")
