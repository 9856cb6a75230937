"""A GPU run's time, extrapolated from the GPU rows of step_times.csv, against hand
calculations: FLOPs per token from the model's own parameter count, the log-log line between
the H200's small and base steps, proportion outside them; and CPU estimates that never take a
GPU row."""
from __future__ import annotations

import csv
import math

import pytest
import torch

from nvfp4_lab.model import Transformer, model_preset
from nvfp4_lab.quant import cost, gpu_time

H200 = "NVIDIA H200"


def params(name: str) -> int:
    """Non-embedding parameters, counted by the model's modules (meta device)."""
    with torch.device("meta"):
        return Transformer(model_preset(name, vocab_size=256)).num_params()


def rows(fmt: str) -> dict[str, dict[str, str]]:
    """The CSV's GPU rows of ``fmt`` by model, read here without the library."""
    with open(cost.SHIPPED, newline="") as f:
        return {r["model"]: r for r in csv.DictReader(f)
                if r["device"] == "cuda" and r["format"] == fmt}


def test_flops_per_token_by_hand():
    """small at V = 32768, T = 1024: 6 (N + V D) + 6 L T D."""
    small = model_preset("small", vocab_size=32768)
    assert gpu_time.flops_per_token(small, 1024) == \
        6 * (params("small") + 32768 * 512) + 6 * 10 * 1024 * 512 == 273_742_848


def test_between_the_rows_the_log_log_line():
    """gpt2_small at GPT-2's padded vocabulary, NVFP4: F = 670,745,088 between small's
    273,742,848 and base's 956,454,912; b = ln(133.7 / 104.2) / ln(956,454,912 / 273,742,848)
    = 0.1993, so 104.2 ms x (670,745,088 / 273,742,848)^0.1993 = 124.57 ms for 8192 tokens."""
    model = model_preset("gpt2_small", vocab_size=50304)
    f = gpu_time.flops_per_token(model, 1024)
    assert f == 6 * (params("gpt2_small") + 50304 * 768) + 6 * 12 * 1024 * 768
    nv = rows("nvfp4")
    assert (nv["small"]["ms_per_step"], nv["base"]["ms_per_step"]) == ("104.2", "133.7")
    gpu = [r for r in cost.shipped() if r.device == "cuda" and r.format == "nvfp4"]
    assert gpu_time.ms_per_token(gpu, f) * 8192 == pytest.approx(124.57, abs=0.01)


def test_outside_the_rows_in_proportion_to_the_nearer_one():
    """paper_1b2 (above base) scales base's BF16 step by its FLOPs; nano (below small),
    small's."""
    gpu = [r for r in cost.shipped() if r.device == "cuda" and r.format == "bf16"]
    f_small = 6 * (params("small") + 32768 * 512) + 6 * 10 * 1024 * 512
    f_base = 6 * (params("base") + 32768 * 1024) + 6 * 12 * 1024 * 1024
    big = 6 * (params("paper_1b2") + 32768 * 2048) + 6 * 20 * 1024 * 2048
    tiny = 6 * (params("nano") + 32768 * 128) + 6 * 5 * 1024 * 128
    assert gpu_time.ms_per_token(gpu, big) == pytest.approx(40.0 / 8192 * big / f_base)
    assert gpu_time.ms_per_token(gpu, tiny) == pytest.approx(24.0 / 8192 * tiny / f_small)


def test_the_bracketing_pair_of_three_rows():
    """With a third size the line runs between the two rows around the point."""
    def row(model: str, ms: float) -> cost.Shipped:
        return cost.Shipped(H200, "cuda", "bf16", model, 32768, 1024, 8192, 0, "none", ms,
                            None, "")
    three = [row("small", 24.0), row("base", 40.0), row("micro", 10.0)]
    f_micro = 6 * (params("micro") + 32768 * 256) + 6 * 8 * 1024 * 256
    f_small = 6 * (params("small") + 32768 * 512) + 6 * 10 * 1024 * 512
    mid = math.sqrt(f_micro * f_small)        # halfway in log: the geometric mean of the ms
    assert gpu_time.ms_per_token(three, mid) * 8192 == pytest.approx(math.sqrt(10.0 * 24.0))


def test_a_run_is_its_steps_and_the_larger_warm_up():
    """2431 steps of 64 micro-batches of 8192 tokens, NVFP4: 24.1 s (small's warm-up, the
    larger) + 2431 x 64 x 124.57 ms."""
    model = model_preset("gpt2_small", vocab_size=50304)
    est = gpu_time.estimate(model, "nvfp4", 1024, 64 * 8192, 2431)
    assert est.step_ms == pytest.approx(64 * 124.57, abs=0.7)
    assert est.seconds == pytest.approx(24.1 + 2431 * est.step_ms / 1000)
    assert (est.backend, est.machine_class, est.sizes) == ("triton", H200, ("small", "base"))
    assert est.label() == (f"{est.step_ms / 1000:.2f} s/step extrapolated from the steps of "
                           "small and base measured on an NVIDIA H200 (quant/step_times.csv); "
                           "not measured")
    other = gpu_time.estimate(model, "nvfp4", 1024, 64 * 8192, 2431, "NVIDIA H100 80GB HBM3")
    assert other == est                                     # no H100 rows: the H200's
    assert gpu_time.estimate(model_preset("hybrid_small", vocab_size=50304), "nvfp4", 1024,
                             8192, 10) is None
    assert gpu_time.estimate(model, "fp16", 1024, 8192, 10) is None


def test_a_cpu_first_estimate_never_takes_a_gpu_row():
    """A CPU class the table lacks, at small's size and 0 threads (the GPU rows' own): its
    BF16 estimate still comes from a CPU row."""
    small = model_preset("small")
    shape = cost.Shape("arm64 DEFAULT, Apple family 1", "bf16",
                       cost.work_per_token(small.d_model, small.n_layers, 32768), 8192, 0)
    est = cost.first_estimate(shape, 10, "auto")
    assert est.machine_class != H200 and "x86_64" in est.machine_class
