"""Where the Hydra configs come from: one answer for the CLI, the analysis and the tests.

The configs ship inside the package (``nvfp4_lab/conf/``; a checkout's top-level ``conf`` is a
link to that directory), so an installed wheel finds them exactly as an editable install
does, from any working directory. ``$NVFP4_LAB_CONF`` points at another tree instead: a copy
you edit without touching the installed one.

This module sits below both ``cli`` and ``analysis`` and imports neither: the paper's numbers
(``nvfp4_lab/paper/``, data beside the package, not a config group) are found through it too.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

ENV = "NVFP4_LAB_CONF"
T = TypeVar("T")
PACKAGED = Path(__file__).resolve().parent / "conf"


@dataclass(frozen=True)
class ConfSource:
    """A config tree and why it was chosen (``origin``: ``$NVFP4_LAB_CONF`` or ``package``)."""

    path: Path
    origin: str

    def describe(self) -> str:
        return f"{self.path} (from {self.origin})"


def conf_source() -> ConfSource:
    """``$NVFP4_LAB_CONF`` if set, else the configs shipped with the package.

    Raises SystemExit with one line naming the variable and the fix when the chosen tree has
    no ``config.yaml`` (a user's mistake: no traceback).
    """
    if os.environ.get(ENV):
        source = ConfSource(Path(os.environ[ENV]).expanduser().resolve(), f"${ENV}")
        fix = f"point {ENV} at a directory holding config.yaml, or unset it"
    else:
        source = ConfSource(PACKAGED, "package")
        fix = "reinstall nvfp4-lab (the package data is incomplete)"
    if not (source.path / "config.yaml").is_file():
        raise SystemExit(f"nvfp4-lab: no config.yaml in {source.path} ({source.origin}); {fix}")
    return source


ARM_SWEEP = "arm_sweep"    # ``arm: ${arm_sweep:}``: the sweeper's arms, named once


def register_resolvers() -> None:
    """``${arm_sweep:}``: the keys of the config's ``arms:`` as the comma list a sweeper
    parameter takes, so that an ablation names each arm once and every arm it defines runs."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(ARM_SWEEP):
        OmegaConf.register_new_resolver(ARM_SWEEP, lambda *, _root_: ",".join(_root_.arms))


def conf_dir() -> Path:
    """The Hydra config directory (see ``conf_source``)."""
    return conf_source().path


def paper_dir() -> Path:
    """The paper's reported numbers, one YAML per ablation, shipped in the package: data the
    analysis reads, not configs to compose (so ``run --help`` does not offer them)."""
    return PACKAGED.parent / "paper"


def config_groups() -> dict[str, list[str]]:
    """Each config group of the tree (a folder holding ``*.yaml``) and its options, sorted."""
    root = conf_dir()
    return {d.name: sorted(p.stem for p in d.glob("*.yaml"))
            for d in sorted(root.iterdir()) if d.is_dir() and any(d.glob("*.yaml"))}


def _yaml(path: Path) -> Any:
    """A YAML file as plain containers."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(path))


def option_settings(group: str) -> dict[str, dict[str, Any]]:
    """Each option of ``group`` and the settings its file makes, merged as Hydra composes them
    over those of the options of the same group it names in its ``defaults`` (``_self_``
    last: a preset over ``data/hf.yaml``, a recipe over ``quant/nvfp4.yaml``)."""
    from omegaconf import OmegaConf

    def settings(name: str) -> dict[str, Any]:
        node = _yaml(conf_dir() / group / f"{name}.yaml") or {}
        parents = [settings(p) for p in node.get("defaults") or []
                   if isinstance(p, str) and p != "_self_"]
        own = {str(k): v for k, v in node.items() if k != "defaults"}
        return cast(dict[str, Any], OmegaConf.to_container(OmegaConf.merge(*parents, own)))
    return {name: settings(name) for name in config_groups()[group]}


class Presets(Mapping[str, T]):
    """A group's options as library objects (``make`` of each option's ``option_settings``),
    from the tree ``conf_dir()`` names when read, so that they follow ``$NVFP4_LAB_CONF`` as
    the command line does; read once per tree."""

    def __init__(self, group: str, make: Callable[[dict[str, Any]], T]) -> None:
        self.group, self.make = group, make
        self._read: dict[Path, dict[str, T]] = {}

    def _options(self) -> dict[str, T]:
        tree = conf_dir()
        if tree not in self._read:
            self._read[tree] = {n: self.make(s) for n, s in option_settings(self.group).items()}
        return self._read[tree]

    def __getitem__(self, name: str) -> T:
        return self._options()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._options())

    def __len__(self) -> int:
        return len(self._options())


def default_option(group: str) -> str | None:
    """The option of ``group`` that ``config.yaml`` picks, or None (a group added with +)."""
    defaults = _yaml(conf_dir() / "config.yaml").get("defaults") or []
    return next((str(d[group]) for d in defaults if isinstance(d, dict) and group in d), None)


def run_help() -> str:
    """``run --help``: the help template of ``config.yaml`` (``hydra.help``) with the groups
    listed from the tree, as Hydra's own help writes them, without composing the config
    (which takes Hydra about a second)."""
    import string

    from omegaconf import OmegaConf

    help_cfg = OmegaConf.load(conf_dir() / "config.yaml").hydra.help
    groups = "".join(f"{g}: {', '.join(o)}\n" for g, o in config_groups().items())
    return string.Template(help_cfg.template).safe_substitute(APP_CONFIG_GROUPS=groups)
