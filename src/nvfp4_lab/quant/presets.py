"""The shipped recipes by name, read from the package's ``conf/quant/<name>.yaml``: one
definition for the command line and the library (each file also says where its recipe
comes from).

    nvfp4        the full method (Sec. 4): 2D 16x16 weights, RHT 16 on Wgrad, SR on gradients,
                 the last 20% of blocks in BF16 (the 1.2B model's "last 4 of 20", as a
                 fraction so that it scales to small models, docs/experiments.md, Small scale)
    nvfp4_base   the appendix base method (E.1): every layer NVFP4, 1x16 everywhere, RNE,
                 no RHT, no 2D
    nvfp4_4over6 nvfp4 with 4/6 block-scale selection (Cook et al., arXiv 2512.02010; TE's
                 nvfp4_4over6) on the operands TE allows it on: forward activations and
                 weights (round-to-nearest, no RHT); MAE, global E4M3 limit 256
    nvfp4_row_scaled  nvfp4 with one amax per token for the forward activations (TE's
                 row_scaled_activation)
    quartet_ii   Quartet II (Panferov et al., arXiv 2601.22813): NVFP4 1x16 everywhere
                 (no 2D weights, no BF16 blocks), the forward rounded to nearest, all four
                 backward operands by MS-EDEN after a 128-point RHT on Dgrad and Wgrad with
                 fresh signs at every call (models whose widths 128 does not divide need a
                 smaller quant.rht.size)
    mxfp4        Sec. 5: the full method in MXFP4, RHT 32 on Wgrad, 2D 32x32 weights
    fp8          the FP8 baseline (App. A.1): E4M3, 1x128 blocks for activations and
                 gradients, 128x128 for weights, FP32 scales, first 1 + last 2 blocks BF16
    bf16         nothing quantized
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
