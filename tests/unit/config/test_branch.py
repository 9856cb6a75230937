"""Branching (``config/branch.py``): a precision-switch arm continues the NVFP4 run from its
switch step, and ends where the same arm trained from step 0 ends, bit for bit.

The runs are trained in this process through ``train.task.train`` as the sweep's jobs are
(``SweepPosition`` carries the sweep directory): the parent ``nvfp4`` arm of
``precision_switch_v2``, then its branches; the reference is v1's ``precision_switch``, whose
arms train from step 0. 12 steps, so ``at_fraction: 0.82`` switches at step
round(0.82 * 12) = 10 and ``0.99`` at round(11.88) = 12, the run's end.
"""
from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers.runs import fast
from omegaconf import OmegaConf, open_dict

from nvfp4_lab.config import branch
from nvfp4_lab.config.job import Job
from nvfp4_lab.config.schema import Refused, apply_arm
from nvfp4_lab.rundir import config_hash
from nvfp4_lab.train.progress import SweepPosition
from nvfp4_lab.train.task import train

STEPS, SWITCH = 12, 10
CURVE = ["step", "tokens", "train_loss", "val_loss", "val_bpb", "lr"]
pytestmark = pytest.mark.usefixtures("one_thread")


def overrides(tmp, ablation: str, arm: str) -> list[str]:
    return [f"+ablation={ablation}", f"arm={arm}", *fast(tmp, STEPS), "train.val_every=5",
            "quant.backend=reference", "seed=3", "trainer.threads=1"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{(ablation, arm): run directory}, each sweep's jobs trained in order."""
    from hydra import compose, initialize_config_dir

    from nvfp4_lab.config.schema import register
    from nvfp4_lab.configs import conf_dir

    register()
    tmp = tmp_path_factory.mktemp("branch")
    out = {}
    jobs = [("precision_switch_v2", a) for a in ("nvfp4", "switch_both_0.82", "switch_bwd_0.82")]
    jobs += [("precision_switch", a) for a in ("switch_both_0.82", "switch_bwd_0.82")]
    for i, (ablation, arm) in enumerate(jobs):
        sweep = tmp / ablation
        with initialize_config_dir(str(conf_dir()), version_base="1.3"):
            cfg = compose("config", overrides=overrides(tmp, ablation, arm))
        run = sweep / f"{i}_arm={arm}" / "seed=3"
        summary = train(cfg, run, multirun=True, position=SweepPosition(i, None, sweep))
        assert summary.status == "done", summary.error
        out[ablation, arm] = run
    return out


def metrics(run) -> pd.DataFrame:
    return pd.read_csv(run / "metrics.csv")[CURVE]


def summary(run) -> dict:
    return json.loads((run / "summary.json").read_text())


def test_a_branch_ends_bit_equal_to_the_same_arm_trained_from_step_0(runs):
    got = metrics(runs["precision_switch_v2", "switch_both_0.82"])
    want = metrics(runs["precision_switch", "switch_both_0.82"])
    assert list(got["step"]) == list(range(1, STEPS + 1))
    pd.testing.assert_frame_equal(got, want, check_exact=True)      # every step, every value
    assert summary(runs["precision_switch_v2", "switch_both_0.82"])["final_val_loss"] == \
        summary(runs["precision_switch", "switch_both_0.82"])["final_val_loss"]
    # and the switch changed something: the tail is not the parent's
    parent = metrics(runs["precision_switch_v2", "nvfp4"])
    assert (got["train_loss"][got["step"] > SWITCH] != parent["train_loss"][got["step"] > SWITCH]
            ).all()


def test_a_branch_trains_only_its_tail_from_the_parents_checkpoint(runs):
    parent, child = runs["precision_switch_v2", "nvfp4"], runs["precision_switch_v2",
                                                                "switch_both_0.82"]
    assert (parent / "checkpoints" / "branch" / f"step={SWITCH}.ckpt").exists()
    assert sorted(p.name for p in (parent / "checkpoints" / "branch").iterdir()) == \
        [f"step={SWITCH}.ckpt"]      # 0.99's step 12 is the end: nothing to branch there
    assert summary(child)["branched_from"] == {"job": "0_arm=nvfp4/seed=3", "step": SWITCH}
    own = pd.read_csv(child / "logs" / "csv" / "version_0" / "metrics.csv")
    trained = (own.dropna(subset=["train_loss"])["tokens"] / summary(child)["tokens_per_step"])
    assert trained.round().astype(int).min() == SWITCH + 1    # its first step is the 11th


def test_the_backward_only_branch_keeps_the_2d_weight_prefix(runs):
    """v1's arm quantized 1x16 weights from step 0, so it differed from nvfp4 at once; the
    branch shares nvfp4's steps to the switch, then differs."""
    parent = metrics(runs["precision_switch_v2", "nvfp4"])
    branched = metrics(runs["precision_switch_v2", "switch_bwd_0.82"])
    v1 = metrics(runs["precision_switch", "switch_bwd_0.82"])
    head, tail = parent["step"] <= SWITCH, parent["step"] > SWITCH
    pd.testing.assert_frame_equal(branched[head], parent[head], check_exact=True)
    assert (branched["train_loss"][tail] != parent["train_loss"][tail]).all()
    assert v1["train_loss"][1] != parent["train_loss"][1]    # step 2: v1's confound


def test_the_parent_saves_where_its_branches_start(composer, tmp_path):
    cfg = composer(overrides(tmp_path, "precision_switch_v2", "nvfp4"))
    assert branch.save_steps(cfg, 600) == [492, 594]       # round(0.82 * 600), round(0.99 * 600)
    assert branch.save_steps(OmegaConf.merge(cfg, {"arm": "bf16"}), 600) == []
    assert branch.save_steps(composer(overrides(tmp_path, "precision_switch", "nvfp4")), 600) == []


def test_a_branch_is_refused_without_its_parent(composer, tmp_path):
    cfg = composer(overrides(tmp_path, "precision_switch_v2", "switch_fwd_0.82"))
    arm = apply_arm(cfg)
    with pytest.raises(Refused, match="run the ablation as a sweep"):
        branch.find(cfg, arm, None, SWITCH, STEPS)
    sweep = tmp_path / "sweep"
    parent = sweep / "0_arm=nvfp4" / "seed=3"
    parent.mkdir(parents=True)
    with pytest.raises(Refused, match="holds no finished run of arm 'nvfp4'"):
        branch.find(cfg, arm, sweep, SWITCH, STEPS)
    want = config_hash(apply_arm(OmegaConf.merge(cfg, {"arm": "nvfp4"})), world=1)
    record = {"status": "done", "config_hash": want, "max_steps": STEPS, "quant": "nvfp4",
              "seed": 3, "model": "nano", "tokens_per_step": 2048}
    (parent / "summary.json").write_text(json.dumps(record))
    with pytest.raises(Refused, match=f"checkpoint of step {SWITCH}"):     # none written yet
        branch.find(cfg, arm, sweep, SWITCH, STEPS)
    branch.checkpoint_path(parent, SWITCH).parent.mkdir(parents=True)
    branch.checkpoint_path(parent, SWITCH).write_bytes(b"")
    assert branch.find(cfg, arm, sweep, SWITCH, STEPS) == branch.Branch(parent, SWITCH,
                                                                 "0_arm=nvfp4/seed=3")
    (parent / "summary.json").write_text(json.dumps({**record, "status": "running"}))
    with pytest.raises(Refused, match="no finished run"):
        branch.find(cfg, arm, sweep, SWITCH, STEPS)
    (parent / "summary.json").write_text(json.dumps({**record, "max_steps": 40}))
    with pytest.raises(Refused, match="ran 40 steps and this arm 12"):
        branch.find(cfg, arm, sweep, SWITCH, STEPS)


@pytest.mark.parametrize(("arm", "message"), [
    ({"branch_from": "nvfp4"}, "has none; set quant.switch.at_step"),
    ({"branch_from": "fp4", "quant": {"switch": {"at_step": 5}}}, "must name another arm"),
    ({"branch_from": "nvfp4", "quant": {"switch": {"at_step": 0}}}, "leaves nothing to branch"),
])
def test_a_branch_that_cannot_branch_says_why(composer, tmp_path, arm, message):
    cfg = composer(overrides(tmp_path, "precision_switch_v2", "nvfp4"))
    with open_dict(cfg):
        cfg.arms.odd, cfg.arm = arm, "odd"
    with pytest.raises(Refused, match=message):
        Job.resolve(cfg)
