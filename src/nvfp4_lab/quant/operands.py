"""The six GEMM operands of a quantized linear layer, as one typed table.

With X: [tokens, in], W: [out, in] and dY: [tokens, out] (docs/experiments.md, The recipe):

    operand   tensor  GEMM               blocked along                          stream
    fprop.x   X       Y  = X . W^T       in-features  (axis -1)                 0
    fprop.w   W       Y  = X . W^T       in-features  (axis -1; 2D: 16x16)      1
    dgrad.dy  dY      dX = dY . W        out-features (axis -1)                 0
    dgrad.w   W       dX = dY . W        out-features (axis 0; 2D or same-dim:  1
                                                       Fprop's W reused)
    wgrad.dy  dY      dW = dY^T . X      tokens       (axis 0)                  0
    wgrad.x   X       dW = dY^T . X      tokens       (axis 0)                  1

"stream" tells an operand's random stream from the other operand of its GEMM
(``formats.Stream``). The names are what configs and logs spell; code looks an operand up
here (``OPS``) and never takes its name apart. Operand lists (``sr``, ``quantize``, ...) also
take the groups of ``GROUPS``: all, forward (Fprop's), backward (Dgrad's and Wgrad's),
weights, activations, gradients. ``LayerMetric`` names a layer's statistics in metrics.csv.
"""
from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass


class Gemm(enum.StrEnum):
    fprop = "fprop"
    dgrad = "dgrad"
    wgrad = "wgrad"

    @property
    def number(self) -> int:
        """0, 1, 2: the GEMM's place in random-stream and sign-vector ids."""
        return list(Gemm).index(self)


@dataclass(frozen=True)
class GemmOperand:
    """One operand of a layer's three GEMMs (the table above)."""

    name: str
    gemm: Gemm
    tensor: str         # "activations" | "weights" | "gradients"
    axis: int           # the axis it is blocked along for its own GEMM
    stream: int         # 0 or 1: which of its GEMM's two operands


OPS: dict[str, GemmOperand] = {o.name: o for o in (
    GemmOperand("fprop.x", Gemm.fprop, "activations", -1, 0),
    GemmOperand("fprop.w", Gemm.fprop, "weights", -1, 1),
    GemmOperand("dgrad.dy", Gemm.dgrad, "gradients", -1, 0),
    GemmOperand("dgrad.w", Gemm.dgrad, "weights", 0, 1),
    GemmOperand("wgrad.dy", Gemm.wgrad, "gradients", 0, 0),
    GemmOperand("wgrad.x", Gemm.wgrad, "activations", 0, 1))}
OPERANDS = tuple(OPS)
GEMMS = tuple(g.value for g in Gemm)


def _where(keep: Callable[[GemmOperand], bool]) -> tuple[str, ...]:
    return tuple(name for name, o in OPS.items() if keep(o))


GROUPS: dict[str, tuple[str, ...]] = {
    "all": OPERANDS,
    "forward": _where(lambda o: o.gemm == Gemm.fprop),
    "backward": _where(lambda o: o.gemm != Gemm.fprop),
    "weights": _where(lambda o: o.tensor == "weights"),
    "activations": _where(lambda o: o.tensor == "activations"),
    "gradients": _where(lambda o: o.tensor == "gradients"),
}


WGRAD_OUTPUT = "wgrad"  # the source of the statistics of dW itself, beside the operands'


@dataclass(frozen=True)
class LayerMetric:
    """One statistic of one layer (quant/stats.py), the metrics.csv column
    ``<layer>/<source>/<metric>``; ``source`` is an operand name or ``WGRAD_OUTPUT``."""

    layer: str          # the module path, e.g. blocks.3.mlp.fc1
    source: str
    metric: str         # rel_err, noise_ratio, ...

    @property
    def column(self) -> str:
        return f"{self.layer}/{self.source}/{self.metric}"

    @property
    def name(self) -> str:
        """What the statistic is, whichever layer: ``wgrad.dy/rel_err``."""
        return f"{self.source}/{self.metric}"

    @property
    def block(self) -> int:
        """The layer's block index (blocks.3.mlp.fc1: 3), -1 outside the blocks."""
        return next((int(p) for p in self.layer.split(".") if p.isdigit()), -1)

    @classmethod
    def parse(cls, column: str) -> LayerMetric | None:
        """The statistic a metrics.csv column holds; None for any other column."""
        parts = column.rsplit("/", 2)
        if len(parts) != 3 or parts[1] not in (*OPERANDS, WGRAD_OUTPUT) or not parts[2]:
            return None
        return cls(*parts)
