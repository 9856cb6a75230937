"""SLURM without a cluster: a 2-job sweep through hydra-submitit-launcher's local executor
(``hydra/launcher=submitit_local``, submitit's stand-in for ``submitit_slurm``), its jobs sent
the pre-emption signal mid-run as SLURM sends it before a requeue.

submitit catches the signal (SIGUSR2, its default), pickles the job again through the Hydra
launcher's ``checkpoint`` and exits for a requeue; the local controller starts the job again,
Hydra runs it into the same directory, and ``resume=auto`` continues from the last periodic
checkpoint. The requeued jobs end with the bytes of an uninterrupted sweep's, and the sweep's
summary and report tables come out the same.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import torch
from helpers.runs import SCRIPT, descendants, process_env

ARGS = ["run", "-m", "hydra/launcher=submitit_local", "seed=0,1", "data=pydoc",
        "model.n_layers=2", "quant.backend=reference", "train.seq_len=64",
        "train.batch_size=4", "train.val_batches=2", "train.warmup=0", "trainer.progress=plain",
        "train.max_steps=16", "train.val_every=4", "train.ckpt_every=4", "train.log_every=1"]
TIMEOUT = 240
RESULTS = ["seed", "status", "steps", "final_val_loss", "best_val_loss", "final_train_loss"]


def _job_tasks(pid: int) -> list[int]:
    """The submitit tasks (``python -m submitit.core._submit``) the sweep started."""
    def cmdline(p):
        try:
            return Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except FileNotFoundError:   # ended between the listing and this read
            return ""
    return [p for p in descendants(pid) if "submitit.core._submit" in cmdline(p)]


def _stdout(task: int) -> Path | None:
    """A submitit task's stdout: its job's own ``*_log.out``. None once the task is gone, and
    before the task has redirected it (its fd 1 is then still the launcher's pipe)."""
    try:
        target = Path(os.readlink(f"/proc/{task}/fd/1"))
    except FileNotFoundError:
        return None
    return target if target.name.endswith("_log.out") and target.is_file() else None


def _run_dir(sweep: Path, seed: int) -> Path:
    found = list(sweep.glob(f"{seed}_*/seed={seed}"))
    assert len(found) == 1, found
    return found[0]


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]


def test_preempted_jobs_are_requeued_and_end_as_uninterrupted_ones(tmp_path):
    out = f"output_root={tmp_path / 'out'}"
    straight = tmp_path / "straight"
    r = subprocess.run([SCRIPT, *ARGS, out, f"hydra.sweep.dir={straight}"], cwd=tmp_path,
                       env=process_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr[-3000:]

    cut = tmp_path / "preempted"
    p = subprocess.Popen([SCRIPT, *ARGS, out, f"hydra.sweep.dir={cut}"], cwd=tmp_path,
                         env=process_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    try:
        deadline = time.monotonic() + TIMEOUT
        # each job pre-empted once, past its step-4 checkpoint and before it can finish (at
        # ~0.1 s a step), as its own output shows it: the two may start seconds apart on a
        # busy machine. A job is known by its log, which its requeued task writes on.
        signalled: set[Path] = set()
        while len(signalled) < 2:
            assert p.poll() is None and time.monotonic() < deadline, p.stdout.read()
            for task in _job_tasks(p.pid):
                log = _stdout(task)
                if log and log not in signalled and "step 6/16" in log.read_text():
                    os.kill(task, signal.SIGUSR2)
                    signalled.add(log)
            time.sleep(0.02)
        output, _ = p.communicate(timeout=TIMEOUT)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, output[-4000:]

    for seed in (0, 1):
        run, ref = _run_dir(cut, seed), _run_dir(straight, seed)
        log = run / "cli.log"
        assert log.read_text().count("step 1/16") == 1        # resumed, not restarted
        assert len(list((run / "logs" / "csv").iterdir())) == 2, seed   # two attempts
        want, got = _weights(ref), _weights(run)
        assert all(torch.equal(want[k], got[k]) for k in want), seed
    a, b = (pd.read_csv(s / "sweep_summary.csv") for s in (straight, cut))
    assert a[RESULTS].equals(b[RESULTS]) and (b["status"] == "done").all()
    for table in ("final_loss.csv",):
        assert (straight / "tables" / table).read_text() == (cut / "tables" / table).read_text()
    errors = "".join(e.read_text() for e in cut.glob(".submitit/*/*_log.err"))
    assert errors.count("Caught signal SIGUSR2") == 2, errors[-3000:]
