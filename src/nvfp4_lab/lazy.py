"""A package's public names, imported on first use (PEP 562).

The config dataclasses (``quant.Recipe``, ``model.ModelConfig``, ``data.DataConfig``) sit in
packages whose other modules import torch and Lightning. With eager ``__init__``s, reading one
config imported both before a typo could be reported (benchmarks/bench_cli.py); with
``exports`` a package imports a submodule only when one of its names is first used, so the
command-line check (``config/preflight.py``) composes and validates a config with neither
loaded. A public name must not also be a submodule's name: the import system would bind the
submodule over it.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def exports(package: str, names: dict[str, str]
            ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``names`` maps each public name to
    the submodule (relative to ``package``) that defines it."""
    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{names[name]}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*names, *vars(sys.modules[package])})

    return __getattr__, __dir__


def by_module(modules: dict[str, str]) -> dict[str, str]:
    """``{"spec": "QuantSpec RHTSpec"}`` -> ``{"QuantSpec": "spec", "RHTSpec": "spec"}``."""
    return {name: module for module, names in modules.items() for name in names.split()}
