"""Composing ``conf/`` in-process, with the fast offline settings every runner test uses."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from nvfp4_lab.configs import conf_dir
from nvfp4_lab.train.schema import register

# 2 blocks (the ablation test uses 5), bytes of the stdlib's pydoc text, the eager
# reference backend: seconds per run
FAST = ["data=pydoc", "model.n_layers=2", "train.seq_len=64", "train.batch_size=4",
        "train.val_batches=2", "train.warmup=0", "trainer.progress=none"]


def fast(tmp: Path, steps: int = 2) -> list[str]:
    return [*FAST, f"output_root={tmp}", f"train.max_steps={steps}", f"train.val_every={steps}",
            f"train.ckpt_every={steps}", "train.log_every=1"]


@pytest.fixture
def composer():
    register()

    def _compose(overrides: list[str]):
        with initialize_config_dir(str(conf_dir()), version_base="1.3"):
            return compose("config", overrides=overrides)
    return _compose
