"""The shipped recipes by name, read from the package's ``conf/quant/<name>.yaml``: one
definition for the command line and the library (each file also says where its recipe
comes from).
"""
from __future__ import annotations

import yaml

from ..configs import PACKAGED
from .recipe import Recipe, from_dict


def _load() -> dict[str, Recipe]:
    return {p.stem: from_dict(yaml.safe_load(p.read_text()))
            for p in sorted((PACKAGED / "quant").glob("*.yaml"))}


PRESETS: dict[str, Recipe] = _load()


def preset(name: str, /, **changes) -> Recipe:
    """A preset by name, optionally with fields changed (nested ones as dicts)."""
    if name not in PRESETS:
        raise ValueError(f"quant={name!r} is not one of {', '.join(PRESETS)}")
    recipe = PRESETS[name]
    return recipe.replace(**changes) if changes else recipe
