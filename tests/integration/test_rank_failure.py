"""A rank that fails ends every rank: real torchrun ranks (gloo, 2 CPU processes), rank 1
failing at step 2 (``rank_fault.py``). Both ranks stop within the subprocess timeout, each
says in one line which rank failed and why, the summary records the same, and the run
directory holds only whole files (the tracebacks in ``errors/``)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers.runs import TORCHRUN, process_env

FAULT = Path(__file__).with_name("rank_fault.py")
ARGS = ["run", "trainer=ddp", "trainer.accelerator=cpu", "trainer.precision=32-true",
        "quant=nvfp4", "data=pydoc", "model.n_layers=2", "quant.backend=reference",
        "train.seq_len=64", "train.batch_size=4", "train.val_batches=2", "train.warmup=0",
        "trainer.progress=plain", "train.max_steps=12", "train.val_every=4",
        "train.ckpt_every=4", "train.log_every=1"]
TIMEOUT = 180     # seconds: a rank left waiting on a collective would hang until killed here


@pytest.mark.parametrize("fault, status, cause", [
    ("raise", "failed", "rank 1: RuntimeError: simulated out of memory"),
    ("nan", "diverged", "rank 1: non-finite train loss (nan) at step 2; first non-finite "
                        "output: blocks.0.attn.qkv"),
])
def test_a_failing_rank_ends_every_rank_naming_itself(tmp_path, fault, status, cause):
    run = tmp_path / "run"
    cmd = [*TORCHRUN, str(FAULT), fault, *ARGS, f"output_root={tmp_path / 'out'}",
           f"hydra.run.dir={run}"]
    r = subprocess.run(cmd, cwd=tmp_path, env=process_env(),
                       capture_output=True, text=True, timeout=TIMEOUT)
    text = r.stdout + r.stderr
    assert r.returncode != 0, text[-4000:]
    lines = [line for line in text.splitlines() if line.startswith("nvfp4-lab:")]
    assert len(lines) == 2, text[-4000:]                  # one line on each rank
    assert all(line.startswith(f"nvfp4-lab: {cause}") for line in lines), lines
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == status and summary["error"].startswith(cause), summary
    assert summary["steps"] == 2
    record = (run / "errors" / "rank1.txt").read_text().splitlines()
    assert record[0] == status and record[1].startswith(cause.removeprefix("rank 1: "))
    assert not [p for p in run.rglob("*.tmp")]            # no half-written file
