"""The learning-rate schedule in optimizer steps: linear warmup, then WSD (constant, then a linear
decay over the last ``decay`` of the run, as the paper) or cosine, both down to
``min_lr_ratio`` of the peak. Imports nothing, so that the trainer's ``LambdaLR``
(``train/module.py``) and the figures' shaded decay (``analysis/sources/collect.py``) read one
arithmetic."""
from __future__ import annotations

import math
from dataclasses import dataclass

SCHEDULES = ("wsd", "cosine")


@dataclass(frozen=True)
class LRSchedule:
    """The multiplier of the peak learning rate at each step of a run of ``max_steps``;
    ``warmup`` and ``decay`` are fractions of its steps. The defaults are ``train``'s."""

    max_steps: int
    kind: str = "wsd"
    warmup: float = 0.05
    decay: float = 0.15             # WSD: the final fraction of steps spent decaying
    min_lr_ratio: float = 0.01      # the paper decays to 1% of the peak

    @property
    def warmup_steps(self) -> int:
        return round(self.warmup * self.max_steps)

    @property
    def decay_start(self) -> int:
        """WSD: the first step of the linear decay (the last round(decay x steps) decay)."""
        return self.max_steps - round(self.decay * self.max_steps)

    def factor(self, step: int) -> float:
        """The multiplier at optimizer step ``step`` (0-based): what ``LambdaLR`` calls."""
        warmup, floor = self.warmup_steps, self.min_lr_ratio
        if step < warmup:
            return (step + 1) / warmup
        if self.kind == "wsd":
            start = self.decay_start
            if step < start:
                return 1.0
            frac = (step + 1 - start) / max(self.max_steps - start, 1)   # floor at the end
        else:
            frac = (step + 1 - warmup) / max(self.max_steps - warmup, 1)
            frac = 0.5 * (1 - math.cos(math.pi * min(frac, 1.0)))
        return 1.0 - (1.0 - floor) * min(frac, 1.0)

    def falls_from(self) -> int | None:
        """WSD: the first step trained below the peak once warmup is over (where a figure
        shades the decay); None for cosine (it falls throughout) and for a rate that never
        falls."""
        start = max(self.decay_start, self.warmup_steps)
        if self.kind != "wsd" or start >= self.max_steps or self.min_lr_ratio >= 1:
            return None
        return start
