"""``convert(model, recipe)``: swap the chosen ``nn.Linear``s for ``QuantLinear``s.

Candidates are the linear layers inside the model's transformer blocks (the ``nn.ModuleList``
named by ``blocks``, or found as the longest ModuleList holding linear layers). Everything
outside the blocks stays as it is (docs/experiments.md, High precision): a linear layer there,
such as the LM head, gets a report row saying so; embeddings, norms, the attention BMMs and
softmax are not linear layers and are never touched. A candidate stays high precision if the
recipe's ``high_precision`` selects its block or its name.

The converter fails loudly rather than train something else than was asked for: a name
pattern that matches no layer, more blocks selected than the model has, or a layer whose
dimensions do not fit the format's blocks (with the layer and the fix in the message). It
returns a ``Report``: one row per linear layer, saying what each operand of each GEMM gets
or why the layer stays in high precision.
"""
from __future__ import annotations

import fnmatch
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

from . import backends
from .linear import QuantLinear, QuantState
from .operands import LayerMetric
from .plan import GemmPlan, operand_plan
from .recipe import NO_BACKEND, OPERANDS, Recipe, to_dict


@dataclass
class LayerRow:
    name: str
    block: int | None
    in_features: int
    out_features: int
    quantized: bool
    reason: str = ""
    operands: dict[str, str] = field(default_factory=dict)
    kind: str | None = None  # the block's kind in a hybrid (mamba, mlp, attn)


@dataclass
class Report:
    recipe: dict
    backend: str
    layers: list[LayerRow]

    @property
    def quantized(self) -> list[str]:
        return [r.name for r in self.layers if r.quantized]

    def summary(self) -> str:
        params = [r.in_features * r.out_features for r in self.layers]
        q = sum(p for p, r in zip(params, self.layers) if r.quantized)
        if not self.quantized:      # BF16: no backend computes anything
            return (f"recipe {self.recipe['name']}: nothing quantized, all "
                    f"{len(self.layers)} linear layers in high precision")
        return (f"recipe {self.recipe['name']} ({self.backend} backend): "
                f"{len(self.quantized)}/{len(self.layers)} linear layers quantized, "
                f"{100 * q / max(sum(params), 1):.1f}% of linear weights{self._by_kind()}")

    def _by_kind(self) -> str:
        """'; by block kind: mamba 8/10, mlp 8/10, attn 2/2' for a hybrid, else ''."""
        kinds = dict.fromkeys(r.kind for r in self.layers if r.kind)
        counts = [f"{k} {sum(r.quantized for r in self.layers if r.kind == k)}/"
                  f"{sum(r.kind == k for r in self.layers)}" for k in kinds]
        return f"; by block kind: {', '.join(counts)}" if counts else ""

    def table(self) -> str:
        """A fixed-width text table, one line per layer."""
        lines = [self.summary()]
        width = max(len(r.name) for r in self.layers) if self.layers else 4
        for r in self.layers:
            if r.quantized:
                what = "; ".join(f"{op} {d}" for op, d in r.operands.items())
            else:
                what = f"high precision: {r.reason}"
            lines.append(f"  {r.name:<{width}}  [{r.out_features}x{r.in_features}]  {what}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"recipe": self.recipe, "backend": self.backend,
                "layers": [asdict(r) for r in self.layers]}

    def save(self, path: str | Path) -> None:
        """Write the report as JSON (``layer_report.json`` in a run directory)."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))


def find_blocks(model: nn.Module, blocks: str | None = None) -> tuple[str, nn.ModuleList]:
    """(name, list) of the transformer blocks: ``blocks`` if given, else the longest
    ModuleList whose children hold linear layers."""
    if blocks is not None:
        try:
            found = model.get_submodule(blocks)
        except AttributeError:
            raise ValueError(f"blocks={blocks!r}: {type(model).__name__} has no such "
                             f"submodule") from None
        if not isinstance(found, nn.ModuleList):
            raise ValueError(f"blocks={blocks!r} is a {type(found).__name__}, not a ModuleList")
        return blocks, found
    lists = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.ModuleList)
             and any(isinstance(s, nn.Linear) for c in m for s in c.modules())]
    if not lists:
        raise ValueError(f"{type(model).__name__} has no ModuleList of blocks holding linear "
                         f"layers; pass blocks='<name of the block list>'")
    return max(lists, key=lambda nm: len(nm[1]))


def _hp_reason(recipe: Recipe, name: str, block: int, n_blocks: int) -> str:
    hp = recipe.high_precision
    first, last = hp.count("first", n_blocks), hp.count("last", n_blocks)
    if block < first:
        return f"in the first {first} of {n_blocks} blocks (high_precision.first={hp.first})"
    if block >= n_blocks - last:
        return f"in the last {last} of {n_blocks} blocks (high_precision.last={hp.last})"
    pattern = next((p for p in hp.names if fnmatch.fnmatchcase(name, p)), None)
    return f"matches {pattern!r} (high_precision.names)" if pattern else ""


def _check_dims(recipe: Recipe, name: str, linear: nn.Linear) -> None:
    if recipe.format == "bf16":
        return
    b = recipe.element_block
    for dim in ("in_features", "out_features"):
        n = getattr(linear, dim)
        if n % b:
            raise ValueError(
                f"layer {name}: {dim}={n} is not a multiple of the {recipe.format} block "
                f"({b}); use model dimensions that are multiples of {b}, or keep the layer "
                f"in high precision with quant.high_precision.names=['{name}']")
    rht = recipe.rht
    for gemm, dim in (("fprop", "in_features"), ("dgrad", "out_features")):
        if gemm in rht.gemms and getattr(linear, dim) % rht.size:
            raise ValueError(f"layer {name}: RHT on {gemm} needs {dim} "
                             f"({getattr(linear, dim)}) to be a multiple of rht.size "
                             f"({rht.size}); set quant.rht.size to a power of two that divides "
                             f"it, or use model widths that {rht.size} divides")


def convert(model: nn.Module, recipe: Recipe, *, state: QuantState | None = None,
            blocks: str | None = None, backend: backends.Backend | None = None,
            device: torch.device | str | None = None) -> Report:
    """Swap the selected linear layers of ``model`` in place; return the report.

    state: the shared QuantState (a new one if None; read it back with ``quant_state``);
    backend: a resolved backend, else ``recipe.backend`` is resolved and self-tested here on
    ``device`` (default: where the model's parameters are).
    """
    candidates, n_blocks = _candidates(model, recipe, blocks)
    plan = operand_plan(recipe)
    rows = [_row(recipe, plan, name, m, candidates.get(name), n_blocks)
            for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    if backend is None:
        if device is None:
            device = next(model.parameters()).device
        backend = backends.resolve(recipe.backend, recipe.specs, device)
    state = state or QuantState()
    for index, name in enumerate(r.name for r in rows if r.quantized):
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, child, QuantLinear.from_linear(
            getattr(parent, child), recipe=recipe, name=name, index=index, backend=backend,
            state=state))
    quantized = any(r.quantized for r in rows)
    return Report(to_dict(recipe), backend.name if quantized else NO_BACKEND, rows)


def _candidates(model: nn.Module, recipe: Recipe, blocks: str | None
                ) -> tuple[dict[str, tuple[int, str | None]], int]:
    """The linear layers inside the blocks, each with its block's index and kind, and the
    number of blocks; raises where ``recipe.high_precision`` selects what is not there."""
    block_name, block_list = find_blocks(model, blocks)
    for key in ("first", "last"):
        recipe.high_precision.count(key, len(block_list))  # raises if more than there are
    candidates = {f"{block_name}.{i}.{n}": (i, getattr(blk, "kind", None))
                  for i, blk in enumerate(block_list)
                  for n, m in blk.named_modules() if isinstance(m, nn.Linear)}
    for pattern in recipe.high_precision.names:
        if not any(fnmatch.fnmatchcase(n, pattern) for n in candidates):
            raise ValueError(f"high_precision.names: {pattern!r} matches no linear layer; "
                             f"the linear layers are {', '.join(candidates)}")
    return candidates, len(block_list)


def _row(recipe: Recipe, plan: GemmPlan, name: str, linear: nn.Linear,
         candidate: tuple[int, str | None] | None, n_blocks: int) -> LayerRow:
    """What ``linear`` gets: its operands' quantizers, or why it stays high precision."""
    row = LayerRow(name, None, linear.in_features, linear.out_features, False)
    if candidate is None:
        row.reason = "outside the transformer blocks (embeddings and the LM head stay high " \
                     "precision)"
        return row
    row.block, row.kind = candidate
    touches = recipe.format != "bf16" or recipe.rht.gemms
    row.reason = _hp_reason(recipe, name, row.block, n_blocks) or (
        "" if touches else "the recipe quantizes nothing")
    if not row.reason:
        _check_dims(recipe, name, linear)
        row.quantized = True
        row.operands = {op: plan[op].describe() for op in OPERANDS}
    return row


def quant_layers(model: nn.Module) -> list[QuantLinear]:
    return [m for m in model.modules() if isinstance(m, QuantLinear)]


def layer_stats(model: nn.Module) -> dict[str, float]:
    """The statistics the QuantLinears recorded on the last statistics step, as
    ``{LayerMetric.column: value}`` (for a logger), and clears them."""
    out = {}
    for layer in quant_layers(model):
        out.update({LayerMetric(layer.name, *k).column: v for k, v in layer.stats.items()})
        layer.stats = {}
    return out


def quant_state(model: nn.Module) -> QuantState | None:
    """The QuantState shared by the model's QuantLinears (None if nothing was converted)."""
    layers = quant_layers(model)
    return layers[0].state if layers else None
