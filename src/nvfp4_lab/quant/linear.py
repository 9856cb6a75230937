"""``QuantLinear``: an ``nn.Linear`` whose three GEMMs follow a recipe.

The module keeps ``nn.Linear``'s parameters and state-dict keys (the FP32 master weight and
its gradient are unchanged: quantization happens on the way into each GEMM), so checkpoints
move freely between quantized and unquantized models. It adds what the GEMMs need:

* ``index``: the layer's position among the converted layers; with the run seed, the step,
  the micro-batch's slot in the step's global batch (``data.Slots``: rank and micro-batch
  together), the GEMM and the operand it keys the stochastic-rounding bits and the RHT signs
  (``formats/rng.py``), so a run is reproducible, a resumed run draws the bits an
  uninterrupted one would, and DDP ranks draw the bits one process accumulating their
  micro-batches would.
* ``state``: a ``QuantState`` shared by all layers of a model, which the training loop
  advances (``step``, ``slot``) and which switches statistics on for one step in K.
* ``backend``: who quantizes (``backends.py``).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import nn

from ..formats import Stream
from ..formats.hadamard import policy_ids, rht_dim, sign_vector
from ..formats.rng import to_device
from . import stats as stats_mod
from .backends import Backend
from .gemm import Parts, QuantGemm, fprop_only, local_dtype
from .operands import OPS, WGRAD_OUTPUT, Gemm
from .plan import GemmPlan, operand_plan, switched_plan, token_chunk
from .recipe import Recipe


@functools.lru_cache(maxsize=4096)
def device_signs(size: int, policy: str, seed: int, ids: tuple[int, ...],
                 device: torch.device) -> torch.Tensor:
    """The RHT sign vector of ``policy`` for ``ids`` (``hadamard.policy_ids``) on ``device``,
    copied there once, without a host sync, and kept: a ``fixed`` vector for the whole run,
    a drawn one for the forward and backward that share it. Read only."""
    return to_device(sign_vector(size, policy, seed, *ids), device)


@dataclass
class QuantState:
    """Per-model runtime state. step: optimizer step; slot: the micro-batch's slot in the
    step's global batch (``data.Slots``: micro * world + rank; the micro-batch in one
    process); max_steps: the run length (for fractional switches); collect_stats: record
    per-layer statistics on the next forward/backward."""

    seed: int = 0
    step: int = 0
    slot: int = 0
    max_steps: int | None = None
    collect_stats: bool = False


class QuantLinear(nn.Linear):
    """y = x W^T (+ b) with Fprop, Dgrad and Wgrad quantized as ``recipe`` says."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False, *,
                 recipe: Recipe, name: str = "", index: int = 0,
                 backend: Backend | None = None, state: QuantState | None = None,
                 device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.recipe, self.name, self.index = recipe, name, index
        self.backend = backend or Backend()
        self.state = state or QuantState()
        self.plan = operand_plan(recipe)
        self.plan_after_switch = switched_plan(self.plan, recipe.switch.off)
        self.stats: dict[tuple[str, str], float] = {}  # (source, metric): LayerMetric

    @classmethod
    def from_linear(cls, linear: nn.Linear, **kwargs) -> QuantLinear:
        """A QuantLinear sharing ``linear``'s parameters (no copy)."""
        q = cls(linear.in_features, linear.out_features, bias=linear.bias is not None,
                device="meta", **kwargs)
        q.weight, q.bias = linear.weight, linear.bias
        return q

    def current_plan(self) -> GemmPlan:
        start = self.recipe.switch.step(self.state.max_steps)
        return self.plan if start is None or self.state.step < start else self.plan_after_switch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        trains = torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)
        product = QuantGemm.apply if trains else fprop_only
        y = product(x, self.weight, self, self.current_plan())
        # a bias (the paper's models have none) is added after the GEMM in its output dtype,
        # not fused into the matmul as nn.Linear's addmm does: same dtype, not the same bits
        return y if self.bias is None else y + self.bias.to(y.dtype)

    # --- called by QuantGemm -------------------------------------------------------------

    def stream(self, op: str) -> Stream:
        """The random stream of operand ``op``, keyed by the micro-batch's slot: DDP ranks
        draw independent SR bits (the all-reduce averages their noise down), the same bits
        one process draws for the same slots of its accumulated micro-batches."""
        o = OPS[op]
        return Stream(layer=self.index, step=self.state.step, gemm=o.gemm.number,
                      operand=o.stream, call=self.state.slot)

    def signs(self, gemm: str, plan: GemmPlan) -> torch.Tensor | None:
        """The RHT sign vector shared by both operands of ``gemm`` (None: no transform)."""
        rht = next((o.rht for op, o in plan.items() if OPS[op].gemm == gemm and o.rht), None)
        if rht is None:
            return None
        call = Gemm(gemm).number + len(Gemm) * self.state.slot
        ids = policy_ids(rht.signs, self.index, self.state.step, call)
        return device_signs(rht.size, rht.signs, rht.seed, ids, self.weight.device)

    def operand(self, x: torch.Tensor, op: str, plan: GemmPlan, cd: torch.dtype,
                signs: torch.Tensor | None) -> Parts:
        """x (activation/gradient in cd, or the FP32 master weight) -> the GEMM operand."""
        o = plan[op]
        if o.reuse:
            raise AssertionError(f"{op} reuses {o.reuse}; QuantGemm must not quantize it")
        if o.spec is None:
            x = x.to(cd)
            return Parts(rht_dim(x, signs, OPS[op].axis) if o.rht else x, None, False)
        local, scale = self.backend.operand(x, o.spec, seed=self.state.seed,
                                            stream=self.stream(o.stream_as or op), signs=signs,
                                            local_dtype=local_dtype(o.spec, x.device))
        return Parts(local, scale, True, o.spec.e4m3_limit)

    def check_tokens(self, tokens: int, plan: GemmPlan) -> None:
        """The Wgrad transform runs along tokens: a partial chunk cannot be transformed."""
        if tokens % (chunk := token_chunk(plan)):
            raise ValueError(
                f"layer {self.name}: the Hadamard transform on Wgrad works on chunks of "
                f"{chunk} tokens, but this micro-batch has {tokens} tokens (batch x "
                f"sequence); make it a multiple of {chunk} or change quant.rht.size")

    def record_stats(self, inputs: dict[str, torch.Tensor], plan: GemmPlan,
                     signs: dict[str, torch.Tensor | None]) -> None:
        """Quantization statistics of the listed operands, if this step collects them."""
        if not self.state.collect_stats:
            return
        for op, x in inputs.items():
            o = plan[op]
            if o.spec is None:
                continue
            values = stats_mod.operand_stats(x, o.spec, seed=self.state.seed,
                                             stream=self.stream(o.stream_as or op),
                                             signs=signs[OPS[op].gemm],
                                             gradient=OPS[op].tensor == "gradients")
            self.stats.update({(op, k): v for k, v in values.items()})

    def record_wgrad_error(self, dw: torch.Tensor, dy: torch.Tensor, x: torch.Tensor) -> None:
        """E06's diagnostic, the relative error of dW against the unquantized product, and the
        gradient-noise ratio ||dW|| / ||dW_q - dW|| (``stats.noise_ratio``)."""
        exact = dy.float().t() @ x.float()
        self.stats[WGRAD_OUTPUT, "rel_err"] = stats_mod.rel_err(dw, exact)
        ratio = stats_mod.noise_ratio(dw, exact)
        if ratio is not None:
            self.stats[WGRAD_OUTPUT, "noise_ratio"] = ratio

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, recipe={self.recipe.name}, backend={self.backend.name}"
