"""The run contract (``rundir.py``): ``summary.json`` as one typed ``Summary``, read from
every file the project has published and written back as the same record."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nvfp4_lab import rundir
from nvfp4_lab.rundir import COLUMNS, Status, Summary

RESULTS = Path(__file__).resolve().parents[2] / "results"
PUBLISHED = sorted(RESULTS.rglob("summary.json"))


def test_every_published_summary_reads_and_writes_back_the_same_record(tmp_path):
    assert len(PUBLISHED) > 200
    for path in PUBLISHED:
        raw = json.loads(path.read_text())
        summary = Summary.read(path.parent)
        assert (summary.status.value, summary.config_hash) == (raw["status"], raw["config_hash"])
        summary.write(tmp_path)
        back = json.loads((tmp_path / "summary.json").read_text())
        # what the file held comes back unchanged; what it lacked comes back unset (None)
        assert {k: back[k] for k in raw} == raw, path
        assert all(back[k] is None for k in set(back) - set(raw)), path


def test_a_run_that_never_branched_has_no_branch_key(tmp_path):
    s = Summary(status=Status.running, quant="bf16", seed=0, model="nano", max_steps=10,
                tokens_per_step=2048, config_hash="abc")
    s.write(tmp_path)
    raw = json.loads((tmp_path / "summary.json").read_text())
    assert "branched_from" not in raw and raw["status"] == "running" and raw["arm"] is None
    assert not list(tmp_path.glob("*.tmp"))


def test_an_unknown_status_is_refused(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps(
        {"status": "finished", "quant": "bf16", "seed": 0, "model": "nano", "max_steps": 1,
         "tokens_per_step": 1, "config_hash": "x"}))
    with pytest.raises(ValueError, match="finished"):
        Summary.read(tmp_path)
    assert Summary.read(tmp_path / "nothing") is None


def test_the_sweep_columns_lead_with_what_a_reader_compares():
    assert COLUMNS[:10] == ("job", "status", "quant", "arm", "seed", "model", "steps",
                            "tokens", "final_val_loss", "best_val_loss")
    assert len(set(COLUMNS)) == len(COLUMNS)


def test_the_first_rank_error_of_this_attempt_is_the_cause(tmp_path):
    old = rundir.RankError(0, rundir.Status.failed, "RuntimeError: an earlier attempt's")
    old.record(tmp_path, "trace 0")
    stamp = (tmp_path / "errors" / "rank0.txt").stat().st_mtime
    os.utime(tmp_path / "errors" / "rank0.txt", (stamp - 60, stamp - 60))
    assert rundir.RankError.first(tmp_path, since=stamp - 30) is None
    cause = rundir.RankError(1, rundir.Status.diverged, "non-finite train loss at step 2")
    cause.record(tmp_path, "trace 1")
    lost = rundir.RankError(0, rundir.Status.failed, "RuntimeError: connection closed")
    lost.record(tmp_path, "trace 0")
    os.utime(tmp_path / "errors" / "rank0.txt", (stamp + 5, stamp + 5))
    os.utime(tmp_path / "errors" / "rank1.txt", (stamp + 1, stamp + 1))
    assert rundir.RankError.first(tmp_path, since=stamp - 30) == cause
    assert str(cause) == "rank 1: non-finite train loss at step 2"
    assert (tmp_path / "errors" / "rank1.txt").read_text().endswith("trace 1")


def _summary(run: Path, status: Status, chash: str = "abc", tokens_per_step: int = 2048) -> None:
    Summary(status=status, quant="bf16", seed=0, model="nano", max_steps=10,
            tokens_per_step=tokens_per_step, config_hash=chash).write(run)


def _checkpoint(run: Path) -> None:
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")


def test_a_directory_says_whether_a_run_starts_resumes_or_is_left_alone(tmp_path):
    start = rundir.check_can_start
    assert start(tmp_path / "absent", "abc", "auto", 2048) is rundir.Start.new
    _summary(tmp_path, Status.failed)          # failed before its first checkpoint
    assert start(tmp_path, "abc", "auto", 2048) is rundir.Start.new
    _checkpoint(tmp_path)
    assert start(tmp_path, "abc", "auto", 2048) is rundir.Start.resume
    _summary(tmp_path, Status.done)
    assert start(tmp_path, "abc", "auto", 2048) is rundir.Start.done


def test_a_directory_refuses_another_config_another_layout_or_resume_never(tmp_path):
    _summary(tmp_path, Status.running)
    _checkpoint(tmp_path)
    with pytest.raises(rundir.RunExists, match="hash abc, this one xyz"):
        rundir.check_can_start(tmp_path, "xyz", "auto", 2048)
    with pytest.raises(rundir.RunExists, match="2048 tokens per step, these settings give 4096"):
        rundir.check_can_start(tmp_path, "abc", "auto", 4096)
    with pytest.raises(rundir.RunExists, match="status running.*resume=auto"):
        rundir.check_can_start(tmp_path, "abc", "never", 2048)
    _summary(tmp_path, Status.done)            # a finished run is left alone at any layout
    assert rundir.check_can_start(tmp_path, "abc", "auto", 4096) is rundir.Start.done


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_code_hash_names_the_sources_that_ran(tmp_path):
    """A wheel has no git SHA: the hash of its Python sources says which code ran. It follows
    every byte and every path of the sources, and nothing else."""
    files = {"__init__.py": "x = 1\n", "train/task.py": "y = 2\n"}
    a = _package(tmp_path / "a" / "nvfp4_lab", files)
    b = _package(tmp_path / "b" / "nvfp4_lab", files)
    (b / "train" / "__pycache__").mkdir()
    (b / "train" / "__pycache__" / "task.cpython-311.pyc").write_bytes(b"\0")
    (b / "notes.txt").write_text("not code")
    assert rundir.code_sha256((a,)) == rundir.code_sha256((b,))
    (b / "train" / "task.py").write_text("y = 3\n")
    edited = rundir.code_sha256((b,))
    (b / "train" / "task.py").rename(b / "train" / "job.py")
    renamed = rundir.code_sha256((b,))
    assert len({rundir.code_sha256((a,)), edited, renamed}) == 3


def test_the_code_hash_covers_this_package_and_the_kernels():
    import nvfp4_kernels
    import nvfp4_lab

    own = Path(nvfp4_lab.__file__).parent
    kernels = Path(nvfp4_kernels.__file__).parent
    assert rundir.code_sha256() == rundir.code_sha256((own, kernels)) \
        != rundir.code_sha256((own,))
