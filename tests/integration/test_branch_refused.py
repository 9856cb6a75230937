"""A branch started without its parent, as a user would start it: one line, nothing written.

``+ablation=precision_switch_v2 arm=switch_fwd_0.82`` sweeps the seeds of one branch arm
alone, so no job of the sweep has trained the ``nvfp4`` run it continues. The job refuses
before it writes anything (``config/branch.py``); Hydra's own log of the job goes with it.
"""
from __future__ import annotations

import subprocess

from helpers.runs import SCRIPT, process_env

FAST = ["data=pydoc", "model.n_layers=2", "quant.backend=reference", "train.seq_len=64",
        "train.batch_size=4", "train.val_batches=2", "trainer.progress=plain"]


def test_a_branch_without_its_parent_is_refused_in_one_line(tmp_path):
    cmd = [SCRIPT, "run",
           "+ablation=precision_switch_v2", "arm=switch_fwd_0.82", "seed=3", *FAST,
           "train.max_steps=12", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    r = subprocess.run(cmd, cwd=tmp_path, env=process_env(), capture_output=True, text=True,
                       timeout=240)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("nvfp4-lab:")]
    assert len(lines) == 1 and "branch_from='nvfp4'" in lines[0], r.stderr
    assert "run arm 'nvfp4' first" in lines[0] and "checkpoint of step 10" in lines[0]
    # the sweep's own record only (Hydra's and its plan): no job directory
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir()) == ["multirun.yaml",
                                                                      "sweep_plan.json"]
