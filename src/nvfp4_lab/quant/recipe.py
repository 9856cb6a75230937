"""The recipe: which operand of which GEMM gets which treatment, in which layers, when.

A ``Recipe`` is plain data (it is what ``conf/quant/*.yaml`` holds) and every field is
validated when it is built, naming the field and the allowed values. ``plan.operand_plan``
turns it into six per-operand decisions, the ``GemmPlan`` that a ``QuantLinear`` executes.

The six operands of a layer's GEMMs and the groups that operand lists take are in
``operands.py``.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from ..formats import spec
from ..formats.spec import ERRORS, LIMITS, SIGN_POLICIES, SR_MODES, RHTSpec, _choice, check_size
from .operands import GEMMS, GROUPS, OPERANDS, OPS
from .plan import operand_plan

RECIPE_FORMATS = ("bf16", "fp8", "mxfp4", "nvfp4")
BACKENDS = ("auto", "reference", "compiled", "triton")
# what a run that quantizes nothing records as its backend: none of them runs
NO_BACKEND = "none"
WEIGHT_BLOCKS = ("1d", "1d_same_dim", "2d")
TENSOR_BLOCKS = ("1d", "1d_same_dim")
PASSES = ("fwd", "bwd", "both")
# element format and default block size of each recipe format
ELEMENT = {"fp8": ("fp8_e4m3", 128), "mxfp4": ("mxfp4", 32), "nvfp4": ("nvfp4", 16)}
# (tensor, its blocks field, the operand quantized first, the operand that reuses it under
# same-dim or 2D blocks)
TENSORS = (("weights", "weight_blocks", "fprop.w", "dgrad.w"),
           ("activations", "act_blocks", "fprop.x", "wgrad.x"),
           ("gradients", "grad_blocks", "dgrad.dy", "wgrad.dy"))


def _names(items) -> tuple:
    """A YAML list, or a bare string meaning a list of one."""
    return (items,) if isinstance(items, str) else tuple(items)


def expand(name: str, items) -> tuple[str, ...]:
    """Operand names and group names -> the operand names they stand for, in OPERANDS order."""
    if isinstance(items, str):
        items = (items,)
    chosen = set()
    for item in items:
        if item not in OPERANDS and item not in GROUPS:
            raise ValueError(f"{name}: {item!r} is not an operand or group; operands: "
                             f"{', '.join(OPERANDS)}; groups: {', '.join(GROUPS)}")
        chosen.update(GROUPS.get(item, (item,)))
    return tuple(op for op in OPERANDS if op in chosen)


@dataclass(frozen=True)
class RHTConfig:
    """Random Hadamard transform on both operands of the listed GEMMs (paper Sec. 4.2)."""

    gemms: tuple[str, ...] = ("wgrad",)
    size: int = 16
    signs: str = "fixed"
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "gemms", _names(self.gemms))
        for g in self.gemms:
            _choice("rht.gemms", g, GEMMS)
        try:
            check_size(self.size)
        except ValueError:
            raise ValueError(f"rht.size={self.size!r} must be a power of two in 2..256"
                             ) from None
        _choice("rht.signs", self.signs, SIGN_POLICIES)

    @property
    def spec(self) -> RHTSpec:
        return RHTSpec(self.size, self.signs, self.seed)


@dataclass(frozen=True)
class FourOverSix:
    """4/6 block-scale selection (``formats/four_over_six.py``; TE's ``nvfp4_4over6``) on the
    listed operands: per block, the amax mapped to 6 or to 4, whichever quantizes with the
    smaller ``error`` (mae | mse); ``e4m3_limit``: the global E4M3 limit of those operands
    (256, TE's default for 4/6, or 448). NVFP4 only; an operand with SR or an RHT cannot
    take it (TE's rule)."""

    operands: tuple[str, ...] = ()
    error: str = "mae"
    e4m3_limit: int = 256

    def __post_init__(self):
        object.__setattr__(self, "operands", expand("four_over_six.operands", self.operands))
        _choice("four_over_six.error", self.error, ERRORS)
        _choice("four_over_six.e4m3_limit", self.e4m3_limit, LIMITS)


@dataclass(frozen=True)
class HighPrecision:
    """Linear layers kept unquantized: the first / last blocks (an int counts blocks, a float
    in (0, 1) is a fraction of them, rounded up) and layers named by fnmatch patterns."""

    first: int | float = 0
    last: int | float = 0
    names: tuple[str, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "names", _names(self.names))
        for key in ("first", "last"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or (
                    isinstance(v, float) and v >= 1):
                raise ValueError(f"high_precision.{key}={v!r} must be a block count (int >= 0) "
                                 f"or a fraction of the blocks (float in [0, 1))")

    def count(self, key: str, n_blocks: int) -> int:
        """Blocks selected by ``first`` or ``last`` in a model of n_blocks blocks."""
        v = getattr(self, key)
        # round() first so that 0.15 * 20 = 3.0000000000000004 counts 3 blocks, not 4
        n = math.ceil(round(v * n_blocks, 9)) if isinstance(v, float) else v
        if n > n_blocks:
            raise ValueError(f"high_precision.{key}={v} selects {n} blocks, the model has "
                             f"{n_blocks}")
        return n


@dataclass(frozen=True)
class Switch:
    """Switch ``passes`` to high precision for the rest of the run (paper App. D, E04), from
    optimizer step ``at_step`` (int >= 0) or from a fraction ``at_fraction`` (float in [0, 1])
    of the run's steps, step round(at_fraction * max_steps). Set one of the two; neither never
    switches."""

    at_step: int | None = None
    at_fraction: float | None = None
    passes: str = "both"

    def __post_init__(self):
        _choice("switch.passes", self.passes, PASSES)
        s, f = self.at_step, self.at_fraction
        if s is not None and f is not None:
            raise ValueError(f"switch.at_step={s!r} and switch.at_fraction={f!r} are both set; "
                             f"set one of switch.at_step, switch.at_fraction (the other null)")
        if s is not None and (isinstance(s, bool) or not isinstance(s, int) or s < 0):
            fix = (f"; for a fraction of the run use switch.at_fraction={s!r}"
                   if isinstance(s, float) and 0 <= s <= 1 else "")
            raise ValueError(f"switch.at_step={s!r} must be an optimizer step (int >= 0) or "
                             f"null{fix}")
        if f is not None:
            if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f <= 1:
                number = isinstance(f, (int, float)) and not isinstance(f, bool)
                fix = (f"; to switch at step {int(f)} use switch.at_step={int(f)}"
                       if number and float(f).is_integer() and f > 1 else "")
                raise ValueError(f"switch.at_fraction={f!r} must be a fraction of the run's "
                                 f"steps (float in [0, 1]) or null{fix}")
            object.__setattr__(self, "at_fraction", float(f))

    def step(self, max_steps: int | None) -> int | None:
        """The first high-precision step, or None."""
        if self.at_step is not None:
            return self.at_step
        if self.at_fraction is None:
            return None
        if not max_steps:
            raise ValueError(f"switch.at_fraction={self.at_fraction} is a fraction of the run; "
                             f"the number of steps is unknown (set train.max_steps, or use "
                             f"switch.at_step)")
        return round(self.at_fraction * max_steps)

    def off(self, gemm: str) -> bool:
        """True if ``gemm`` is one of the passes that switch."""
        return self.passes == "both" or (self.passes == "fwd") == (gemm == "fprop")


@dataclass(frozen=True)
class Recipe:
    """Everything that decides how a QuantLinear computes. See the module docstring.

    format: bf16 | fp8 | mxfp4 | nvfp4; block: element block size (None: 128 / 32 / 16).
    weight_blocks: 1d (along each GEMM's dot-product dim: differs between Fprop and Dgrad) |
        1d_same_dim (along in-features in both; simulation only, E11) | 2d (tiles, reused).
    act_blocks, grad_blocks: 1d | 1d_same_dim (the Wgrad copy reuses the other GEMM's).
    rht: RHTConfig; sr: operands with stochastic rounding (the rest RNE); sr_mode: hw8 | exact.
    four_over_six: FourOverSix (operands with 4/6 block-scale selection; none by default).
    row_scaled: operands with one NVFP4 amax per row (token) instead of per tensor (TE's
        row-scaled NVFP4): fprop.x and/or dgrad.dy, rounded to nearest, without an RHT.
    ms_eden: operands rounded by Quartet II's MS-EDEN (``formats/ms_eden.py``) instead of RNE
        or SR: NVFP4 operands of a GEMM with an RHT whose size is a multiple of 16.
    quantize: operands quantized at all; high_precision: layers kept unquantized;
    switch: the late precision switch; mx_scale: MXFP4 E8M0 rounding; backend: see backends.
    """

    name: str = "nvfp4"
    format: str = "nvfp4"
    block: int | None = None
    weight_blocks: str = "2d"
    act_blocks: str = "1d"
    grad_blocks: str = "1d"
    rht: RHTConfig = field(default_factory=RHTConfig)
    sr: tuple[str, ...] = ("gradients",)
    sr_mode: str = "hw8"
    four_over_six: FourOverSix = field(default_factory=FourOverSix)
    row_scaled: tuple[str, ...] = ()
    ms_eden: tuple[str, ...] = ()
    quantize: tuple[str, ...] = ("all",)
    high_precision: HighPrecision = field(default_factory=HighPrecision)
    switch: Switch = field(default_factory=Switch)
    mx_scale: str = "ceil"
    backend: str = "auto"

    def __post_init__(self):
        _choice("format", self.format, RECIPE_FORMATS)
        _choice("weight_blocks", self.weight_blocks, WEIGHT_BLOCKS)
        _choice("act_blocks", self.act_blocks, TENSOR_BLOCKS)
        _choice("grad_blocks", self.grad_blocks, TENSOR_BLOCKS)
        _choice("sr_mode", self.sr_mode, SR_MODES)
        _choice("backend", self.backend, BACKENDS)
        for key, cls in (("rht", RHTConfig), ("four_over_six", FourOverSix),
                         ("high_precision", HighPrecision), ("switch", Switch)):
            value = getattr(self, key)
            if isinstance(value, dict):
                object.__setattr__(self, key, _build(cls, value, key + "."))
            elif not isinstance(value, cls):
                raise ValueError(f"{key}={value!r} must be a mapping of {cls.__name__} fields "
                                 f"({', '.join(f.name for f in dataclasses.fields(cls))})")
        object.__setattr__(self, "sr", expand("sr", self.sr))
        object.__setattr__(self, "quantize", expand("quantize", self.quantize))
        object.__setattr__(self, "row_scaled", expand("row_scaled", self.row_scaled))
        object.__setattr__(self, "ms_eden", expand("ms_eden", self.ms_eden))
        if self.block is not None and (isinstance(self.block, bool) or not isinstance(
                self.block, int) or self.block < 2 or self.block & (self.block - 1)):
            raise ValueError(f"block={self.block} must be a power of two >= 2 or null")
        if self.format in ("bf16", "fp8") and self.sr:
            raise ValueError(f"sr={list(self.sr)}: stochastic rounding is for FP4 formats; "
                             f"format={self.format} needs sr=[]")
        self._check_reuse()
        self._check_four_over_six()
        self._check_row_scaled()
        self._check_ms_eden()
        operand_plan(self)  # every remaining inconsistency fails here, not mid-training

    def _check_four_over_six(self) -> None:
        ops = self.four_over_six.operands
        if ops and self.format != "nvfp4":
            raise ValueError(f"four_over_six.operands={list(ops)}: 4/6 is an NVFP4 scale rule; "
                             f"format={self.format} needs four_over_six.operands=[]")
        for op in ops:
            why = ("is not quantized (quantize=" + str(list(self.quantize)) + ")"
                   if op not in self.quantize else
                   "has stochastic rounding (sr lists it)" if op in self.sr else
                   f"has an RHT (rht.gemms={list(self.rht.gemms)})"
                   if OPS[op].gemm in self.rht.gemms else None)
            if why:
                raise ValueError(f"four_over_six.operands lists {op}, which {why}; 4/6 rounds "
                                 f"to nearest without a transform (TE's rule): drop {op} from "
                                 f"four_over_six.operands")

    def _check_reuse(self) -> None:
        """A same-dim / 2D tensor is quantized once and reused by its second GEMM, so both
        uses must agree, and no RHT may touch the dot-product dim it was blocked along."""
        for tensor, key, first, second in TENSORS:
            mode = getattr(self, key)
            if mode == "1d":
                continue
            for lst in ("sr", "quantize", "four_over_six.operands"):
                chosen = (self.four_over_six.operands if lst == "four_over_six.operands"
                          else getattr(self, lst))
                if (first in chosen) != (second in chosen):
                    raise ValueError(
                        f"{key}={mode} quantizes {tensor} once and reuses it in "
                        f"{OPS[second].gemm}, so {lst} must list both {first} and {second} "
                        f"or neither (or use {key}=1d)")
            gemms = {OPS[first].gemm, OPS[second].gemm}
            if self.format != "bf16" and gemms & set(self.rht.gemms):
                raise ValueError(
                    f"{key}={mode} reuses one quantization of {tensor} in "
                    f"{OPS[first].gemm} and {OPS[second].gemm}, which a Hadamard transform on "
                    f"either GEMM would break; rht.gemms={list(self.rht.gemms)} needs {key}=1d")

    def _check_row_scaled(self) -> None:
        """A per-row amax scales the GEMM output per row: only an operand whose rows are the
        output's rows (Fprop's X, Dgrad's dY), quantized once for that GEMM alone."""
        if self.row_scaled and self.format != "nvfp4":
            raise ValueError(f"row_scaled={list(self.row_scaled)}: a per-row amax is NVFP4's; "
                             f"format={self.format} needs row_scaled=[]")
        blocks = {first: key for _, key, first, _ in TENSORS}
        for op in self.row_scaled:
            why = ("is not an operand whose rows are the output's (fprop.x, dgrad.dy)"
                   if op not in ("fprop.x", "dgrad.dy") else
                   "is not quantized" if op not in self.quantize else
                   "has stochastic rounding (sr lists it)" if op in self.sr else
                   f"has an RHT (rht.gemms={list(self.rht.gemms)})"
                   if OPS[op].gemm in self.rht.gemms else
                   f"is reused by another GEMM ({blocks[op]}={getattr(self, blocks[op])})"
                   if getattr(self, blocks[op]) != "1d" else None)
            if why:
                raise ValueError(f"row_scaled lists {op}, which {why}; TE's row-scaled NVFP4 "
                                 f"is for such operands only: drop {op} from row_scaled")

    def _check_ms_eden(self) -> None:
        if self.ms_eden and (self.format != "nvfp4" or self.rht.size % 16):
            raise ValueError(f"ms_eden={list(self.ms_eden)}: MS-EDEN corrects whole Hadamard "
                             f"groups of NVFP4 blocks; it needs format=nvfp4 (not "
                             f"{self.format}) and rht.size a multiple of 16 (not "
                             f"{self.rht.size})")
        for op in self.ms_eden:
            why = ("is not quantized" if op not in self.quantize else
                   "has stochastic rounding (sr lists it too)" if op in self.sr else
                   f"has no RHT (rht.gemms={list(self.rht.gemms)})"
                   if OPS[op].gemm not in self.rht.gemms else None)
            if why:
                raise ValueError(f"ms_eden lists {op}, which {why}; MS-EDEN rounds an operand "
                                 f"after its GEMM's Hadamard transform, in place of SR: fix "
                                 f"ms_eden, sr or rht.gemms")

    @property
    def element_format(self) -> str:
        return ELEMENT[self.format][0]

    @property
    def element_block(self) -> int:
        return self.block or ELEMENT[self.format][1]

    def reused(self) -> dict[str, str]:
        """{operand: the operand whose quantization it reuses} under same-dim or 2D blocks."""
        return {second: first for _, key, first, second in TENSORS
                if getattr(self, key) != "1d"}

    @property
    def specs(self) -> tuple[spec.QuantSpec, ...]:
        """The quantizers of its operands: what a backend self-tests and compiles."""
        return tuple(o.spec for o in operand_plan(self).values() if o.spec)

    def replace(self, **changes) -> Recipe:
        """A copy with fields changed. A nested config given as a dict changes only the
        fields it names: ``replace(rht={"signs": "none"})`` keeps the size."""
        d = to_dict(self)
        for k, v in changes.items():
            d[k] = {**d[k], **v} if isinstance(v, dict) and isinstance(d.get(k), dict) else v
        return from_dict(d)


# recipe keys that were removed, and what to write instead
REMOVED = {
    "switch.at": "set switch.at_step (the optimizer step to switch at, int >= 0) or "
                 "switch.at_fraction (a fraction of the run's steps, float in [0, 1])",
}


def _build(cls, d: dict, prefix: str = ""):
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    for k in d:
        if f"{prefix}{k}" in REMOVED:
            raise ValueError(f"{prefix}{k}={d[k]!r}: {prefix}{k} is no longer a recipe key; "
                             f"{REMOVED[prefix + k]}")
        if k not in names:
            where = f" ({prefix}{k})" if prefix else ""
            raise ValueError(f"unknown recipe key {k!r}{where}; allowed: {', '.join(names)}")
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def from_dict(d: dict) -> Recipe:
    """A Recipe from plain data (a YAML mapping, an OmegaConf container converted to dict)."""
    return _build(Recipe, dict(d))


def to_dict(recipe: Recipe) -> dict:
    """Plain data that ``from_dict`` turns back into an equal recipe."""
    d = dataclasses.asdict(recipe)
    d["sr"], d["quantize"] = list(recipe.sr), list(recipe.quantize)
    d["row_scaled"], d["ms_eden"] = list(recipe.row_scaled), list(recipe.ms_eden)
    d["four_over_six"]["operands"] = list(recipe.four_over_six.operands)
    return d
