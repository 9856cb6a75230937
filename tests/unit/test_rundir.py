"""The run contract (``rundir.py``): ``summary.json`` as one typed ``Summary``, read from
every file the project has published and written back as the same record."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

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


# a config as the run directory's ``config.yaml`` holds it (resolved), and the one it changes to
CFG = OmegaConf.create({"seed": 0, "resume": "auto", "train": {"lr": 0.001, "batch_size": 8}})
OTHER = OmegaConf.merge(CFG, {"seed": 1, "train": {"lr": 0.002}})


def _summary(run: Path, status: Status, cfg: DictConfig = CFG, tokens_per_step: int = 2048,
             ) -> None:
    Summary(status=status, quant="bf16", seed=0, model="nano", max_steps=10,
            tokens_per_step=tokens_per_step,
            config_hash=rundir.config_hash(cfg, world=1)).write(run)


def _checkpoint(run: Path) -> Path:
    """A real (tiny) checkpoint file: torch's zip archive."""
    import torch

    (run / "checkpoints").mkdir(parents=True)
    torch.save({"global_step": 3, "state_dict": {"w": torch.ones(64)}},
               run / "checkpoints" / "last.ckpt")
    return run / "checkpoints" / "last.ckpt"


def _start(run: Path, cfg: DictConfig = CFG, tokens_per_step: int = 2048) -> rundir.Start:
    return rundir.check_can_start(run, cfg, world=1, tokens_per_step=tokens_per_step)


def test_a_directory_says_whether_a_run_starts_resumes_or_is_left_alone(tmp_path):
    assert _start(tmp_path / "absent") is rundir.Start.new
    _summary(tmp_path, Status.failed)          # failed before its first checkpoint
    assert _start(tmp_path) is rundir.Start.new
    _checkpoint(tmp_path)
    assert _start(tmp_path) is rundir.Start.resume
    _summary(tmp_path, Status.done)
    assert _start(tmp_path) is rundir.Start.done


def test_a_directory_refuses_another_config_another_layout_or_resume_never(tmp_path):
    _summary(tmp_path, Status.running)
    _checkpoint(tmp_path)
    with pytest.raises(rundir.RunExists, match=f"hash {rundir.config_hash(CFG, world=1)}, "
                                               f"this one {rundir.config_hash(OTHER, world=1)}"):
        _start(tmp_path, OTHER)                # no config.yaml to name the keys from
    with pytest.raises(rundir.RunExists, match="2048 tokens per step, these settings give 4096"):
        _start(tmp_path, tokens_per_step=4096)
    with pytest.raises(rundir.RunExists, match="status running.*resume=auto"):
        _start(tmp_path, OmegaConf.merge(CFG, {"resume": "never"}))
    _summary(tmp_path, Status.done)            # a finished run is left alone at any layout
    assert _start(tmp_path, tokens_per_step=4096) is rundir.Start.done


def test_a_refused_config_names_each_key_that_differs_with_both_values(tmp_path):
    """The run's ``config.yaml`` against the new config: ``resume`` (not hashed) is no
    difference."""
    OmegaConf.save(CFG, tmp_path / "config.yaml", resolve=True)
    _summary(tmp_path, Status.running)
    with pytest.raises(rundir.RunExists) as refused:
        _start(tmp_path, OmegaConf.merge(OTHER, {"resume": "auto"}))
    message = str(refused.value)
    assert message == (f"{tmp_path} holds a run of a different config (seed: 0 there, 1 here; "
                       "train.lr: 0.001 there, 0.002 here); refusing to mix them. Choose "
                       "another hydra.run.dir."), message


def test_a_long_difference_names_the_first_keys_and_counts_the_rest(tmp_path):
    many = OmegaConf.create({"train": {f"k{i}": i for i in range(8)}, "resume": "auto"})
    OmegaConf.save(many, tmp_path / "config.yaml")
    _summary(tmp_path, Status.running, many)
    changed = OmegaConf.create({"train": {f"k{i}": -i - 1 for i in range(8)}, "resume": "auto"})
    with pytest.raises(rundir.RunExists, match=r"train\.k4: 4 there, -5 here; and 3 more keys\)"):
        _start(tmp_path, changed)


def test_a_checkpoint_cut_short_is_refused_naming_the_file_and_the_choices(tmp_path):
    """A copy cut short would end in torch's zip reader: one line instead, nothing changed."""
    _summary(tmp_path, Status.running)
    ckpt = _checkpoint(tmp_path)
    whole = ckpt.read_bytes()
    ckpt.write_bytes(whole[:len(whole) // 2])
    with pytest.raises(rundir.RunExists) as refused:
        _start(tmp_path)
    message = str(refused.value)
    assert message.startswith(f"{ckpt} is not a readable checkpoint (") and "\n" not in message
    assert "restore the file" in message and "delete it" in message, message
    assert ckpt.read_bytes() == whole[:len(whole) // 2]


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
