"""From a recipe to what a quantized layer does: one decision per GEMM operand.

``operand_plan(recipe)`` gives the six operands of ``recipe.OPERANDS`` each an ``Operand``: the
quantizer spec it is rounded with (None: high precision), the RHT applied to it, or the
operand whose quantization it reuses (2D or same-dim blocks, where Fprop's quantized W or X
serves the backward GEMM as it is). ``switched_plan`` is the plan after the precision switch of
E04. ``QuantLinear`` (``linear.py``) executes a plan; ``convert`` reports it per layer.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol

from ..formats import QuantSpec, RHTSpec
from .operands import OPERANDS, OPS


class Planned(Protocol):
    """What a plan reads of a recipe: ``recipe.Recipe``, which validates itself through
    ``operand_plan``, so this module names its fields instead of importing it."""

    format: str
    weight_blocks: str
    sr_mode: str
    mx_scale: str
    rht: Any                  # RHTConfig: spec, gemms
    four_over_six: Any        # FourOverSix: operands, error, e4m3_limit
    quantize: Collection[str]
    sr: Collection[str]
    ms_eden: Collection[str]
    row_scaled: Collection[str]

    @property
    def element_format(self) -> str: ...
    @property
    def element_block(self) -> int: ...
    def reused(self) -> dict[str, str]: ...


@dataclass(frozen=True)
class Operand:
    """One GEMM operand: its quantizer (None: high precision), the RHT applied to it (also
    when it is not quantized, so that the transform cancels in the product), whether it
    reuses the quantization of another operand (2D or same-dim blocks), and the operand
    whose random stream it draws from (itself unless it stands in for a reused one)."""

    spec: QuantSpec | None = None
    rht: RHTSpec | None = None
    reuse: str | None = None
    stream_as: str | None = None

    def describe(self) -> str:
        if self.reuse:
            return f"= {self.reuse}"
        rht = f" rht{self.rht.size}/{self.rht.signs}" if self.rht else ""
        if self.spec is None:
            return "high precision" + rht
        s = self.spec
        block = "x".join(map(str, s.block)) if s.block else "tensor"
        rounding = s.rounding + (f"/{s.sr_mode}" if s.rounding == "sr" else "")
        four6 = f" 4/6-{s.four_over_six} L={s.e4m3_limit}" if s.four_over_six else ""
        rows = " amax/row" if s.amax == "row" else ""
        return f"{s.fmt} {block} axis={s.axis} {rounding}{four6}{rows}{rht}"


GemmPlan = dict[str, Operand]  # operand name -> Operand, for the six OPERANDS


def operand_plan(recipe: Planned) -> GemmPlan:
    """The six operands of a quantized layer under ``recipe``."""
    rht = recipe.rht.spec if recipe.rht.gemms else None
    reused = recipe.reused()
    plan = {}
    for op in OPERANDS:
        op_rht = rht if OPS[op].gemm in recipe.rht.gemms else None
        if op in reused:
            plan[op] = Operand(reuse=reused[op])
        elif recipe.format == "bf16" or op not in recipe.quantize:
            plan[op] = Operand(None, op_rht)
        else:
            plan[op] = Operand(_spec(recipe, op, op_rht), op_rht)
    return plan


def token_chunk(plan: GemmPlan) -> int:
    """The tokens a micro-batch must be a multiple of under ``plan``: Wgrad's RHT runs along
    them in chunks of its size, and a partial chunk cannot be transformed; 1 without one."""
    rht = plan["wgrad.x"].rht or plan["wgrad.dy"].rht
    return rht.size if rht else 1


def switched_plan(plan: GemmPlan, off: Callable[[str], bool]) -> GemmPlan:
    """``plan`` after the precision switch (``off``: ``Switch.off``, whether it turns a GEMM
    off): the switched GEMMs run unquantized, without RHT. An operand that reused a
    now-unquantized one gets that operand's quantizer and stream (a forward-only switch keeps
    the 2D weight that Dgrad sees)."""
    out = {op: Operand() if off(OPS[op].gemm) else o for op, o in plan.items()}
    for op, o in out.items():
        if o.reuse and off(OPS[o.reuse].gemm):
            out[op] = dataclasses.replace(plan[o.reuse], stream_as=o.reuse)
    return out


def _spec(recipe: Planned, op: str, rht: RHTSpec | None) -> QuantSpec:
    fmt, b = recipe.element_format, recipe.element_block
    two_d = OPS[op].tensor == "weights" and recipe.weight_blocks == "2d"
    four6 = recipe.four_over_six if op in recipe.four_over_six.operands else None
    return QuantSpec(fmt=fmt, block=(b, b) if two_d else (1, b), axis=OPS[op].axis,
                     rounding=("sr" if op in recipe.sr else
                               "ms_eden" if op in recipe.ms_eden else "rne"),
                     sr_mode=recipe.sr_mode,
                     mx_scale=recipe.mx_scale, rht=rht,
                     four_over_six=four6.error if four6 else None,
                     e4m3_limit=four6.e4m3_limit if four6 else None,
                     amax="row" if op in recipe.row_scaled else "tensor")
