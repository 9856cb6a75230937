"""A GPU run's time, extrapolated from the GPU step times that ``step_times.csv`` holds.

The table's GPU rows (``device`` cuda) are training steps measured on one GPU class, an NVIDIA
H200, for two sizes, ``small`` and ``base``, at 8 x 1024 tokens and a vocabulary of 32768
(benchmarks/RESULTS.md, GPU check). A run of any other model, vocabulary, context or batch was
never timed on a GPU: its time is extrapolated from the two rows of its format, and says so.
Size is measured as training FLOPs per token:

    F = 6 (N + V D) + 6 L T D

N the non-embedding parameters and V D the output head (a multiply-add per weight forward,
two backward: 6 FLOPs), then the attention's scores and weighted values over the causal half
of a context of T tokens (2 x 2 x D x T/2 per block forward, three times that with the
backward). A GPU's step does not grow in proportion to F: ``base`` does 3.5x ``small``'s
FLOPs per token in 1.7x its BF16 step and 1.3x its NVFP4 step (a small model leaves the GPU
idle, and the quantizers' launches and memory traffic do not grow as D^2). So the time per
token follows the straight line through the two rows in log-log,

    ms(F) = ms_a (F / F_a)^b,    b = ln(ms_b / ms_a) / ln(F_b / F_a)

between them, and is in proportion to F (b = 1, a GPU busy throughout) from the nearer row
outside them. A step of ``tokens`` tokens per device (micro-batches run one after another)
takes ms(F) x tokens, and a run adds the larger warm-up of the rows (Triton's autotuning and
compiling). Validation passes and checkpoints are not in the measured steps and are left out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..model.config import ModelConfig
from ..model.presets import model_preset
from .cost import Shipped, shipped

SOURCE = "quant/step_times.csv"


def flops_per_token(model: ModelConfig, seq_len: int) -> float:
    """Training FLOPs per token of a transformer with its vocabulary set, at context
    ``seq_len``: 6 (N + V D) + 6 L T D."""
    d = model.d_model
    return 6 * (model.non_embedding_params() + model.vocab_size * d) + \
        6 * model.n_layers * seq_len * d


def row_flops(row: Shipped) -> float:
    """``flops_per_token`` of the configuration a shipped row measured."""
    return flops_per_token(model_preset(row.model, vocab_size=row.vocab_size), row.seq_len)


def ms_per_token(rows: list[Shipped], flops: float) -> float:
    """Milliseconds per token at ``flops`` per token: the log-log line through the two rows
    whose FLOPs bracket it, else in proportion from the nearer end row."""
    points = sorted((row_flops(r), r.ms_per_step / r.tokens_per_step) for r in rows)
    for (f0, m0), (f1, m1) in zip(points, points[1:]):
        if f0 <= flops <= f1 and f1 > f0:
            return m0 * (flops / f0) ** (math.log(m1 / m0) / math.log(f1 / f0))
    f0, m0 = points[0] if flops < points[0][0] else points[-1]
    return m0 * flops / f0


@dataclass(frozen=True)
class GpuEstimate:
    """A run's wall seconds on one GPU, extrapolated from the rows of ``machine_class``
    measured for the models ``sizes``; ``step_ms``: one optimizer step."""

    seconds: float
    step_ms: float
    backend: str
    machine_class: str
    sizes: tuple[str, ...]

    def label(self) -> str:
        return (f"{self.step_ms / 1000:.2f} s/step extrapolated from the steps of "
                f"{' and '.join(self.sizes)} measured on an {self.machine_class} "
                f"({SOURCE}); not measured")


def estimate(model: ModelConfig, fmt: str, seq_len: int, tokens: int, steps: int,
             gpu: str | None = None) -> GpuEstimate | None:
    """``steps`` steps of ``tokens`` tokens per device of ``model`` (vocabulary set) in
    ``fmt`` on one GPU, from the rows of the class ``gpu`` names if it has any, else of the
    first GPU class in the table; None for a hybrid (the rows are transformers') or a format
    with no GPU row."""
    rows = [r for r in shipped() if r.device == "cuda" and r.format == fmt]
    if model.pattern or not rows:
        return None
    cls = gpu if any(r.machine_class == gpu for r in rows) else rows[0].machine_class
    rows = [r for r in rows if r.machine_class == cls]
    step_ms = ms_per_token(rows, flops_per_token(model, seq_len)) * tokens
    warmup = max(r.startup_s or 0.0 for r in rows)
    return GpuEstimate(warmup + steps * step_ms / 1000, step_ms, rows[0].backend, cls,
                       tuple(dict.fromkeys(r.model for r in rows)))

