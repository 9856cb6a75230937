"""The reference backend's loss trajectory against a golden file; the NaN/Inf guard; the LR
schedules.

The golden file pins the train loss of the first steps of a fixed config (NVFP4 with every
technique, reference backend, one thread) so that a change to any numerics on the training
path shows up. Regenerate deliberately with ``NVFP4_LAB_REGEN_GOLDEN=1 pytest <this file>``
and say why in the commit."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import fast

from nvfp4_lab.train.module import LMTask, lr_lambda
from nvfp4_lab.train.schema import TrainConfig
from nvfp4_lab.train.task import train

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "nano_nvfp4_reference.json"
pytestmark = pytest.mark.usefixtures("one_thread")


def test_golden_loss_trajectory(composer, tmp_path):
    cfg = composer([*fast(tmp_path, steps=6), "quant=nvfp4", "quant.backend=reference",
                    "quant.high_precision.last=0.5", "seed=0"])
    assert train(cfg, tmp_path / "run")["status"] == "done"
    losses = pd.read_csv(tmp_path / "run" / "metrics.csv")["train_loss"].dropna().tolist()
    assert len(losses) == 6
    if os.environ.get("NVFP4_LAB_REGEN_GOLDEN"):
        GOLDEN.write_text(json.dumps({"torch": torch.__version__, "train_loss": losses},
                                     indent=1) + "\n")
    golden = json.loads(GOLDEN.read_text())["train_loss"]
    # same machine type and torch build: equal to float32 rounding of the CSV round trip
    assert losses == pytest.approx(golden, rel=1e-6, abs=0)


def test_nonfinite_stops_with_step_and_layer(composer, tmp_path, monkeypatch):
    """A weight turned to Inf at step 3 stops the run as diverged, names step and layer, and
    leaves the step-2 checkpoint as it was."""
    cfg = composer([*fast(tmp_path, steps=6), "quant=nvfp4_base", "quant.backend=reference",
                    "train.ckpt_every=2"])
    run = tmp_path / "run"
    original = LMTask.training_step

    def poisoned(self, batch, batch_idx):
        if self.global_step == 3:
            with torch.no_grad():
                self.model.blocks[1].mlp.fc1.weight[0, 0] = float("inf")
        return original(self, batch, batch_idx)

    monkeypatch.setattr(LMTask, "training_step", poisoned)
    summary = train(cfg, run, multirun=True)   # in a sweep: recorded, not raised
    assert summary["status"] == "diverged"
    assert "step 3" in summary["error"] and "blocks.1.mlp.fc1" in summary["error"]
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 2
    assert all(torch.isfinite(v).all() for v in ckpt["state_dict"].values()
               if v.is_floating_point())


@pytest.mark.parametrize("schedule", ["wsd", "cosine"])
def test_lr_schedule_shape(schedule):
    t = TrainConfig(schedule=schedule, warmup=0.1, decay=0.2, min_lr_ratio=0.01)
    f = [lr_lambda(t, 100)(s) for s in range(100)]
    assert f[0] == pytest.approx(0.1) and f[9] == 1.0          # linear warmup over 10 steps
    assert all(0.01 - 1e-12 <= v <= 1.0 for v in f)
    assert all(a >= b for a, b in zip(f[9:], f[10:]))          # never rises after warmup
    if schedule == "wsd":
        assert set(f[9:80]) == {1.0}                           # stable until the last 20%
        assert f[99] == pytest.approx(0.01)                     # linear decay to 1% at the end
    else:
        mid = 0.5 * (1 - math.cos(math.pi * 46 / 90))
        assert f[99] == pytest.approx(0.01)
        assert f[55] == pytest.approx(1 - 0.99 * mid)
