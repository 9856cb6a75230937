"""Per-layer statistics are written in the metrics row of the step they describe, forward and
backward together, whatever ``train.log_every`` is."""
from __future__ import annotations

import platform
from pathlib import Path

import pandas as pd
import torch
from helpers.runs import fast

from nvfp4_lab.train.task import train


def test_statistics_land_in_the_row_of_their_step(composer, tmp_path):
    # statistics on optimizer steps 0 and 4 (rows 1 and 5: steps completed); Lightning's own
    # rows every 3 steps (2 and 5 completed), so only a row of their own puts step 0's at 1
    cfg = composer([*fast(tmp_path, steps=8), "train.log_every=3", "train.stats_every=4",
                    "quant.backend=reference", "quant.high_precision.last=0"])
    summary = train(cfg, tmp_path / "run")
    assert summary.status == "done", summary.error
    m = pd.read_csv(tmp_path / "run" / "metrics.csv")
    forward = [c for c in m if c.endswith("/fprop.x/rel_err")]
    backward = [c for c in m if c.endswith("/wgrad/noise_ratio")]
    assert forward and len(backward) == len(forward)
    rows = m.dropna(subset=forward)
    assert rows["step"].tolist() == [1, 5]
    assert rows[backward].notna().all().all()       # the backward of the same step, same row
    assert m.dropna(subset=backward)["step"].tolist() == [1, 5]


def test_a_run_shorter_than_its_log_interval_counts_its_steps(composer, tmp_path):
    # 3 steps, a row every 10 and no validation: no metrics row has a train loss, yet the
    # summary (and the sweep table built from it) must say 3 steps were trained, not 0
    cfg = composer([*fast(tmp_path, steps=3), "train.log_every=10", "train.val_every=10",
                    "quant=bf16"])
    summary = train(cfg, tmp_path / "run")
    assert summary.status == "done", summary.error
    assert (summary.steps, summary.tokens) == (3, 3 * summary.tokens_per_step)
    assert summary.tokens_per_second > 0
    # and on which CPU kernels (their sums' order decides whether two runs are bit-equal)
    assert torch.backends.cpu.get_cpu_capability() in summary.device
    model = [ln for ln in Path("/proc/cpuinfo").read_text().splitlines()
             if ln.startswith("model name")] if Path("/proc/cpuinfo").exists() else []
    if model:                   # and which processor: same kernels, other CPUs, other sums
        assert model[0].split(":", 1)[1].strip() in summary.device
    # the machine class (sweep/machine.py) and the versions that decide bit-equality
    assert summary.machine_class.startswith(
        f"{platform.machine()} {torch.backends.cpu.get_cpu_capability()}, ")
    family = [ln for ln in Path("/proc/cpuinfo").read_text().splitlines()
              if ln.startswith("cpu family")] if Path("/proc/cpuinfo").exists() else []
    if family:
        assert summary.machine_class.endswith(f" family {family[0].split(':')[1].strip()}")
    assert summary.versions["torch"] == torch.__version__
