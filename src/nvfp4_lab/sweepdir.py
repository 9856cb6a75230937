"""A sweep directory, read: the one place that parses Hydra's ``multirun.yaml``.

    <sweep>/
      multirun.yaml        Hydra's record: the config's ``name``, the sweeper's parameters
                           (``hydra.sweeper.params``) and the command line's overrides
                           (``hydra.overrides.task``)
      sweep_summary.csv    one row per job (``rundir.COLUMNS``), written as the jobs end
      <num>_<overrides>/   one run directory per job (``rundir``), numbered in launch order

Its jobs are the sweeper's parameters expanded with the command line as Hydra expands them
(``rundir.sweep_jobs``), so job ``num`` is the directory ``<num>_*``. The command that re-runs
it is the command line less the keys that only place or show it (``PLACING``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from omegaconf import DictConfig, ListConfig, OmegaConf

from .configs import register_resolvers
from .rundir import SUMMARY, Status, status, sweep_jobs

MULTIRUN = "multirun.yaml"
PLACING = ("hydra.sweep.dir=", "trainer.progress=")    # where it ran, how it printed


@dataclass(frozen=True)
class SweepDir:
    """A sweep's folder and what its ``multirun.yaml`` says: the config's ``name`` (None
    where it has none), the sweeper's ``params`` and the command line's ``overrides``."""

    folder: Path
    name: str | None
    params: dict[str, Any]
    overrides: tuple[str, ...]

    @classmethod
    def read(cls, folder: Path) -> SweepDir | None:
        """The sweep in ``folder``; None where it holds no ``multirun.yaml``."""
        path = Path(folder) / MULTIRUN
        if not path.is_file():
            return None
        cfg = OmegaConf.load(path)
        return cls(Path(folder), OmegaConf.select(cfg, "name"), _params(cfg),
                   tuple(map(str, OmegaConf.select(cfg, "hydra.overrides.task") or ())))

    @property
    def command(self) -> str:
        """The command line that re-runs the sweep."""
        return "nvfp4-lab run -m " + " ".join(o for o in self.overrides
                                               if not o.startswith(PLACING))

    @property
    def grid(self) -> tuple[str, str]:
        """What its jobs are: its command and its sweeper's parameters (two sweeps of one
        grid hold the same jobs)."""
        return self.command, repr(self.params)

    def jobs(self) -> list[list[str]]:
        """Each job's overrides, in launch order."""
        return sweep_jobs(self.params, list(self.overrides))

    def runs(self) -> list[Path]:
        """The run directories under it that hold a ``summary.json``, in path order."""
        return sorted(p.parent for p in self.folder.glob(f"*/*/{SUMMARY}"))

    def done(self) -> list[Path]:
        """Its runs whose summary says done."""
        return [r for r in self.runs() if status(r) == Status.done]


def sweep_params(path: Path) -> dict[str, Any]:
    """The sweeper's parameters of a ``multirun.yaml`` or an ablation file, as Hydra expands
    them (``${arm_sweep:}`` resolved: Hydra records the config unresolved)."""
    return _params(OmegaConf.load(path))


def _params(cfg: DictConfig | ListConfig) -> dict[str, Any]:
    register_resolvers()
    params = OmegaConf.select(cfg, "hydra.sweeper.params")
    return {} if params is None else cast(dict[str, Any],
                                          OmegaConf.to_container(params, resolve=True))
