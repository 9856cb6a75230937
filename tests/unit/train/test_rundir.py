"""The run contract (``train/rundir.py``): ``summary.json`` as one typed ``Summary``, read from
every file the project has published and written back as the same record."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvfp4_lab.train.rundir import COLUMNS, Status, Summary

RESULTS = Path(__file__).resolve().parents[3] / "results"
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
