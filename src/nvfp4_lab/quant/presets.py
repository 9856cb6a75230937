"""The paper's recipes as named presets (``conf/quant/<name>.yaml`` mirrors each).

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

from .recipe import FourOverSix, HighPrecision, Recipe, RHTConfig

NO_RHT = RHTConfig(gemms=())
LAST_20_PERCENT = HighPrecision(last=0.2)

PRESETS: dict[str, Recipe] = {
    "nvfp4": Recipe(name="nvfp4", high_precision=LAST_20_PERCENT),
    "nvfp4_4over6": Recipe(name="nvfp4_4over6", high_precision=LAST_20_PERCENT,
                           four_over_six=FourOverSix(operands=("fprop.x", "weights"))),
    "nvfp4_row_scaled": Recipe(name="nvfp4_row_scaled", high_precision=LAST_20_PERCENT,
                               row_scaled=("fprop.x",)),
    "quartet_ii": Recipe(name="quartet_ii", weight_blocks="1d", sr=(), ms_eden=("backward",),
                         rht=RHTConfig(gemms=("dgrad", "wgrad"), size=128, signs="per_call")),
    "nvfp4_base": Recipe(name="nvfp4_base", weight_blocks="1d", rht=NO_RHT, sr=()),
    "mxfp4": Recipe(name="mxfp4", format="mxfp4", rht=RHTConfig(size=32),
                    high_precision=LAST_20_PERCENT),
    "fp8": Recipe(name="fp8", format="fp8", rht=NO_RHT, sr=(),
                  high_precision=HighPrecision(first=1, last=2)),
    "bf16": Recipe(name="bf16", format="bf16", rht=NO_RHT, sr=()),
}


def preset(name: str, /, **changes) -> Recipe:
    """A preset by name, optionally with fields changed (nested ones as dicts)."""
    if name not in PRESETS:
        raise ValueError(f"quant={name!r} is not one of {', '.join(PRESETS)}")
    recipe = PRESETS[name]
    return recipe.replace(**changes) if changes else recipe
