"""Every shipped ablation, every arm (one seed), trains two steps on a 2-block model.

The lightning-hydra-template idea: glob ``conf/ablation/*`` so that a new ablation file is
tested the day it lands. The swept values come from the file's own ``hydra.sweeper.params``;
each combination is composed and trained in this process through ``train.task.train``. The
ablations the paper ran on its hybrid models run on ``hybrid_nano`` as well."""
from __future__ import annotations

import itertools
import json

import pytest
import yaml
from helpers.runs import fast

from nvfp4_lab.config.schema import apply_arm
from nvfp4_lab.configs import conf_dir
from nvfp4_lab.sweepdir import sweep_params
from nvfp4_lab.train.task import train

CONF = conf_dir()


# swept keys that change a run's length only: two steps stand for every value
LENGTH = ("seed", "train.tokens_per_param")


def jobs():
    """Every arm of every file, but the branches: they continue their parent's run of the
    same sweep from their switch step, which test_branch.py trains."""
    for path in sorted((CONF / "ablation").glob("*.yaml")):
        ablation = yaml.safe_load(path.read_text())
        swept = {k: str(v).split(",") for k, v in sweep_params(path).items() if k not in LENGTH}
        branches = {a for a, c in (ablation.get("arms") or {}).items() if "branch_from" in c}
        for values in itertools.product(*swept.values()):
            if not branches & set(values):
                yield path.stem, [f"{k}={v}" for k, v in zip(swept, values)]


JOBS = list(jobs())
# the paper ran these on its hybrids (E01/E03, E04): every arm on hybrid_nano too
HYBRID_JOBS = [(a, [*o, "model=hybrid_nano"]) for a, o in JOBS
               if a in ("formats", "precision_switch")]


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize(("ablation", "overrides"), JOBS + HYBRID_JOBS,
                         ids=[f"{a}:{','.join(o)}" for a, o in JOBS + HYBRID_JOBS])
def test_ablation_job_trains(composer, tmp_path, ablation, overrides):
    # 16 sequences of 64 tokens: 1024 tokens per micro-batch, enough for a 128-point RHT;
    # nano depth (5 blocks, or hybrid_nano's 7): every arm leaves a block quantized
    depth = 7 if "model=hybrid_nano" in overrides else 5
    cfg = composer([f"+ablation={ablation}", *overrides, *fast(tmp_path),
                    "train.tokens_per_param=null",      # a file's own length: two steps too
                    "quant.backend=reference", "train.batch_size=16", "seed=0",
                    f"model.n_layers={depth}"])
    summary = train(cfg, tmp_path / "run")
    assert summary.status == "done", summary.error
    assert summary.steps == round(2 * apply_arm(cfg).train.tokens_multiplier)
    report = json.loads((tmp_path / "run" / "layer_report.json").read_text())
    quantized = [r for r in report["layers"] if r["quantized"]]
    assert bool(quantized) == (report["recipe"]["format"] != "bf16")
    assert summary.final_val_loss is not None
