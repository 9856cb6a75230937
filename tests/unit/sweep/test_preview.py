"""The dry run of the GPU scale on a machine without a GPU: each job's time on the H200 as
extrapolated from the table's small and base rows (worked out here from the CSV), labelled
as an extrapolation; what only the GPU machine can answer noted, nothing refused or written."""
from __future__ import annotations

import re

import pytest
import torch
from helpers.gpu_scale import h200_seconds, hours, steps

from nvfp4_lab.cli import main


@pytest.mark.parametrize("fmt", ["nvfp4", "bf16"])
def test_the_gpu_scale_dry_run_prints_the_extrapolated_h200_time(fmt, tmp_path, monkeypatch,
                                                                 capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NVFP4_LAB_CACHE", str(tmp_path / "cache"))   # an empty ledger
    assert main(["run", "+scale=gpu_124m", f"quant={fmt}", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    seconds, step_s = h200_seconds(fmt, steps())
    backend = "none" if fmt == "bf16" else "triton"
    job = out.splitlines()[2]
    assert re.search(rf" {steps()}  ~{hours(seconds)} \({backend}; {step_s:.2f} s/step "
                     r"extrapolated from the steps of small and base measured on an NVIDIA "
                     r"H200 \(quant/step_times\.csv\); not measured\)$", job), job
    assert out.splitlines()[3].startswith(f"total ~{hours(seconds)} for 1 of 1 jobs")
    assert "data.path='data/fineweb-edu-gpt2' is not a folder (a run would stop here" in err
    if not torch.cuda.is_available():
        assert "trainer.accelerator=gpu: this machine has no CUDA device" in err
    assert not any(p.name != "cache" for p in tmp_path.iterdir())      # nothing written

