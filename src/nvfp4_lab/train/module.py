"""The LightningModule: a plain transformer, quantized in ``configure_model``, trained on tokens.

The model (``nvfp4_lab.model``) knows nothing about quantization. ``configure_model`` builds
it and hands it to ``quant.convert``, which swaps the recipe's linear layers for
``QuantLinear``s and returns the report saved beside the run (``layer_report.json``). Lightning
calls ``configure_model`` inside the strategy's context, so the same code serves one CPU, DDP
and FSDP.

Every quantized GEMM draws its stochastic-rounding bits and RHT signs from (seed, layer, step,
slot, GEMM, operand), never from a global RNG: ``training_step`` tells the shared
``QuantState`` which step it is in and which slot of the step's global batch its micro-batch
is (``data.Slots``: micro-batch and data-parallel rank), so a resumed run rounds exactly as an
uninterrupted one, and DDP ranks round as one process accumulating their micro-batches.

A non-finite loss or gradient stops training (``NonFiniteError``) with the step and the first
layer that produced a non-finite value named; the exception is raised before the optimizer
step, so no checkpoint with broken weights is ever written.

Loss is logged in nats/token (``train_loss``, ``val_loss``) and bits per byte (``val_bpb``),
with ``tokens`` seen after the step, so curves can be drawn against tokens as in the paper.
"""
from __future__ import annotations

import math

import lightning as L
import torch
from torch import nn

from ..config.schema import TrainConfig
from ..console import say
from ..data import Slots
from ..model import LanguageModel, ModelConfig, build_model, lm_loss
from ..quant import Recipe, convert, layer_stats
from ..quant.converter import find_blocks
from ..quant.linear import QuantLinear, QuantState


class NonFiniteError(RuntimeError):
    """Training produced NaN/Inf; the message names the step and the layer."""


def shard(model: nn.Module, mesh) -> None:
    """FSDP2 on each block, then on the rest. FSDP gathers a layer's whole weight before its
    forward and backward, so the quantizer sees the full tensor (its amax, its 16x16 tiles);
    parameters stay FP32 (no FSDP mixed-precision policy), as the GEMM's operands expect."""
    from torch.distributed.fsdp import fully_shard
    for block in find_blocks(model)[1]:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)


def first_nonfinite(model: nn.Module, x: torch.Tensor) -> str:
    """Re-run the forward pass with hooks and name the first module whose output is not finite
    (``x: [B, T]`` the batch that produced the non-finite loss)."""
    found: list[str] = []

    def hook(name):
        def check(_module, _inputs, out):
            if not found and torch.is_tensor(out) and not torch.isfinite(out).all():
                found.append(name)
        return check

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules() if n]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return found[0] if found else "(no layer output; the loss itself)"


class LMTask(L.LightningModule):
    def __init__(self, model: ModelConfig, recipe: Recipe, train: TrainConfig, *, seed: int,
                 max_steps: int, tokens_per_step: int, bytes_per_token: float | None):
        super().__init__()
        self.model_cfg, self.recipe, self.train_cfg = model, recipe, train
        self.seed, self.max_steps, self.tokens_per_step = seed, max_steps, tokens_per_step
        self.bytes_per_token = bytes_per_token
        self.model: LanguageModel | None = None
        self.report = None
        self.backend = None          # AutoBackend's (use_backend), before configure_model
        self.qstate = QuantState(seed=seed, max_steps=max_steps)
        self.start_step = 0  # the step this process started at: > 0 when resumed

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.start_step = checkpoint["global_step"]   # a resume's or a branch's first step
        if self.trainer.is_global_zero:   # a run that continues says so, in its cli.log too
            say(f"continuing from {self.trainer.ckpt_path} at step {self.start_step}")

    def configure_model(self) -> None:
        if self.model is not None:   # Lightning calls this again on resume and validate
            return
        model = build_model(self.model_cfg)
        self.report = convert(model, self.recipe, state=self.qstate, backend=self.backend)
        if self._device_mesh is not None:    # trainer=fsdp (task._strategy)
            shard(model, self._device_mesh["data_parallel"])
        self.model = model
        if self.global_rank == 0:  # "10/15 linear layers quantized, ...; by block kind: ..."
            say(self.report.summary())

    def use_backend(self, backend) -> None:
        """Quantize with ``backend``: the model built next, or once built from its next GEMM on
        (``AutoBackend``'s switch: the same bits)."""
        self.backend = backend
        if self.model is None:
            return
        for module in self.model.modules():
            if isinstance(module, QuantLinear):
                module.backend = backend
        self.report.backend = backend.name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch                                   # [B, T] each
        step = self.global_step
        self.qstate.step = step
        # the slot keys SR bits and RHT signs: DDP ranks draw what accumulated micro-batches do
        self.qstate.slot = Slots.of(self._trainer).slot(batch_idx % self.train_cfg.accumulate)
        every = self.train_cfg.stats_every
        self.qstate.collect_stats = bool(every) and step % every == 0 and self.qstate.slot == 0
        loss = lm_loss(self(x), y)
        if not torch.isfinite(loss):
            raise NonFiniteError(f"non-finite train loss ({loss.item()}) at step {step}; first "
                                 f"non-finite output: {first_nonfinite(self.model, x)}")
        tokens = (step + 1) * self.tokens_per_step
        lr = self.trainer.optimizers[0].param_groups[0]["lr"] if self._trainer else 0.0
        self.log_dict({"train_loss": loss.detach(), "tokens": float(tokens), "lr": lr},
                      prog_bar=True, on_step=True, on_epoch=False)
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        # stopping at max_steps is what makes Lightning validate after the last step too, so
        # a run whose max_steps is not a multiple of val_every still ends on an evaluation
        if self.global_step >= self.trainer.max_steps:
            self.trainer.should_stop = True

    def on_before_optimizer_step(self, optimizer) -> None:
        for name, p in self.named_parameters():
            if p.grad is not None and not torch.isfinite(p.grad).all():
                raise NonFiniteError(f"non-finite gradient at step {self.global_step} in "
                                     f"{name.removeprefix('model.')}")
        self._log_layer_stats()

    def _log_layer_stats(self) -> None:
        """On a statistics step, after its backward: the forward and backward statistics of
        this step, written to the loggers at once under this step's tokens. Through
        ``self.log`` they would wait for the next ``log_every`` row (and the backward's for
        the next statistics step)."""
        every = self.train_cfg.stats_every
        if not every or self.global_step % every or not self._trainer:
            return
        stats = layer_stats(self.model)
        if stats and self.trainer.is_global_zero:
            stats["tokens"] = float((self.global_step + 1) * self.tokens_per_step)
            for logger in self.loggers:
                logger.log_metrics(stats, step=self.global_step)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = lm_loss(self(x), y)
        self.log("val_loss", loss, prog_bar=True, sync_dist=True)
        if self.bytes_per_token:
            self.log("val_bpb", loss / math.log(2) / self.bytes_per_token, sync_dist=True)
        self.log("tokens", float(self.global_step * self.tokens_per_step), sync_dist=True)

    def configure_optimizers(self):
        t = self.train_cfg
        decay = [p for p in self.parameters() if p.dim() >= 2]
        other = [p for p in self.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": t.weight_decay},
             {"params": other, "weight_decay": 0.0}],
            lr=t.lr, betas=tuple(t.betas), eps=t.eps)
        schedule = t.lr_schedule(self.max_steps)
        # a function, not the bound method: LambdaLR would save a method's __dict__ in the
        # checkpoint, where it has saved None so far
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: schedule.factor(step))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
