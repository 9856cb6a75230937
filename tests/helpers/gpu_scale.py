"""The GPU scale's numbers worked out without the library's cost code: its model's
non-embedding parameters counted by the modules, its run length, and its time on the H200
extrapolated by the rule of quant/gpu_time.py's docstring from the rows of step_times.csv,
read here with the csv module."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import torch

from nvfp4_lab.model import Transformer, model_preset

STEP_TIMES = Path(__file__).resolve().parents[2] / "src" / "nvfp4_lab" / "quant" / \
    "step_times.csv"
TOKENS_PER_PARAM, TOKENS_PER_STEP, MICRO_TOKENS = 20, 8 * 1024 * 64, 8 * 1024


def params(name: str = "gpt2_small") -> int:
    """Non-embedding parameters of a model preset, counted by its modules (meta device)."""
    with torch.device("meta"):
        return int(Transformer(model_preset(name, vocab_size=256)).num_params())


def steps() -> int:
    return math.ceil(TOKENS_PER_PARAM * params() / TOKENS_PER_STEP)


def flops(name: str, vocab: int, seq_len: int) -> float:
    """6 (N + V D) + 6 L T D."""
    m = model_preset(name)
    return float(6 * (params(name) + vocab * m.d_model) + 6 * m.n_layers * seq_len * m.d_model)


def h200_seconds(fmt: str, n_steps: int) -> tuple[float, float]:
    """(seconds of a GPU-scale run of ``fmt``, seconds of one of its steps): the line through
    the small and base rows in log-log, at gpt2_small's FLOPs."""
    with open(STEP_TIMES, newline="") as table:
        rows = {r["model"]: r for r in csv.DictReader(table)
                if r["machine_class"] == "NVIDIA H200" and r["format"] == fmt}
    (fa, ma), (fb, mb) = [(flops(m, int(rows[m]["vocab_size"]), int(rows[m]["seq_len"])),
                           float(rows[m]["ms_per_step"]) / int(rows[m]["tokens_per_step"]))
                          for m in ("small", "base")]
    f = flops("gpt2_small", 50304, 1024)
    step_s = ma * (f / fa) ** (math.log(mb / ma) / math.log(fb / fa)) * TOKENS_PER_STEP / 1000
    warmup = max(float(rows[m]["startup_s"]) for m in ("small", "base"))
    return warmup + n_steps * step_s, step_s


def hours(seconds: float) -> str:
    """``5h23m``: how the dry run writes a time over an hour."""
    s = round(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
