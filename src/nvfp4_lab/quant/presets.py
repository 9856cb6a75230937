"""The shipped recipes by name, read from the config tree the command line composes
(``configs.conf_dir``: the package's ``conf/quant/<name>.yaml``, or ``$NVFP4_LAB_CONF``'s copy),
so that an arm's ``preset: nvfp4`` and ``quant=nvfp4`` are one recipe. A file that starts from
another of its group (``defaults: [nvfp4, _self_]``) is that one with its own keys merged over
it, as Hydra composes it (``configs.option_settings``). Each file says where its recipe comes
from.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..configs import Presets
from .recipe import Recipe, from_dict

PRESETS: Mapping[str, Recipe] = Presets("quant", from_dict)


def preset(name: str, /, **changes: Any) -> Recipe:
    """A preset by name, optionally with fields changed (nested ones as dicts)."""
    if name not in PRESETS:
        raise ValueError(f"quant={name!r} is not one of {', '.join(PRESETS)}")
    recipe = PRESETS[name]
    return recipe.replace(**changes) if changes else recipe
