"""Synthetic run directories: the files a run writes (docs/architecture.md, Run directories),
made by hand so that every number in them is known."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from nvfp4_lab.rundir import Status, Summary

TOKENS_PER_STEP = 1000


def make_run(root: Path, job: str, *, quant: str = "bf16", seed: int = 0, arm: str | None = None,
             steps: list[int] = (10, 20, 30, 40), train_loss=None, val_loss=None,
             status: str = "done", name: str = "synthetic", config: dict | None = None,
             summary: bool = True, error: str | None = None) -> Path:
    """A run directory with config.yaml, summary.json and metrics.csv.

    train_loss / val_loss: one value per step (None: not logged there).
    """
    run = root / job
    run.mkdir(parents=True)
    cfg = {"seed": seed, "name": name, "arm": arm, "arms": {},
           "quant": {"name": quant, "format": quant, "backend": "reference"},
           "train": {"schedule": "wsd", "decay": 0.25, "max_steps": max(steps)},
           "trainer": {"progress": "none"}}
    for key, value in (config or {}).items():
        section, leaf = key.split(".", 1)
        cfg.setdefault(section, {})[leaf] = value
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    train_loss = train_loss or [5.0 - 0.1 * i for i in range(len(steps))]
    val_loss = val_loss or [None] * len(steps)
    metrics = pd.DataFrame({"step": steps, "tokens": [s * TOKENS_PER_STEP for s in steps],
                            "train_loss": train_loss, "val_loss": val_loss})
    metrics.to_csv(run / "metrics.csv", index=False)
    if summary:
        finals = metrics.dropna(subset=["val_loss"])
        Summary(status=Status(status), quant=quant, arm=arm, seed=seed, model="nano",
                max_steps=max(steps), tokens_per_step=TOKENS_PER_STEP, error=error,
                config_hash="synthetic",
                final_val_loss=float(finals["val_loss"].iloc[-1]) if len(finals) else None,
                best_val_loss=float(finals["val_loss"].min()) if len(finals) else None,
                final_train_loss=float(metrics["train_loss"].iloc[-1]),
                steps=max(steps), tokens=max(steps) * TOKENS_PER_STEP).write(run)
    return run


@pytest.fixture
def runs_factory(tmp_path):
    def _make(job: str, **kw) -> Path:
        return make_run(tmp_path / "sweep", job, **kw)
    _make.tokens_per_step = TOKENS_PER_STEP
    _make.root = tmp_path / "sweep"
    return _make
