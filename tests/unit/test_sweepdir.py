"""sweepdir.SweepDir on multirun.yaml files written here: what it reads, its jobs in Hydra's
launch order, the command that re-runs it, its runs and which are done."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from nvfp4_lab.sweepdir import SweepDir

RAW = {"name": "formats",
       "hydra": {"sweeper": {"params": {"seed": "0,1", "quant": "bf16,nvfp4"}},
                 "overrides": {"task": ["+ablation=formats", "hydra.sweep.dir=/tmp/x",
                                        "trainer.progress=plain", "seed=3"]}}}


def _sweep(tmp_path: Path, raw: dict | None = RAW) -> Path:
    if raw is not None:
        (tmp_path / "multirun.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return tmp_path


def test_it_reads_the_name_parameters_and_overrides(tmp_path):
    s = SweepDir.read(_sweep(tmp_path))
    assert (s.name, s.params) == ("formats", {"seed": "0,1", "quant": "bf16,nvfp4"})
    assert s.overrides == ("+ablation=formats", "hydra.sweep.dir=/tmp/x",
                           "trainer.progress=plain", "seed=3")


def test_no_multirun_yaml_is_no_sweep_and_a_bare_one_reads_empty(tmp_path):
    assert SweepDir.read(tmp_path) is None
    s = SweepDir.read(_sweep(tmp_path, {}))
    assert (s.name, s.params, s.overrides) == (None, {}, ())


def test_the_command_leaves_out_where_it_ran_and_how_it_printed(tmp_path):
    assert SweepDir.read(_sweep(tmp_path)).command == \
        "nvfp4-lab run -m +ablation=formats seed=3"


def test_jobs_expand_as_hydra_does_the_command_line_winning(tmp_path):
    """The sweeper's seed 0,1 is replaced by the command line's seed=3; quant varies."""
    jobs = SweepDir.read(_sweep(tmp_path)).jobs()
    assert [sorted(j for j in job if j.startswith(("seed=", "quant="))) for job in jobs] == \
        [["quant=bf16", "seed=3"], ["quant=nvfp4", "seed=3"]]


def test_runs_are_the_directories_with_a_summary_and_done_reads_their_status(tmp_path):
    sweep = _sweep(tmp_path)
    for job, status in (("0_quant=bf16", "done"), ("1_quant=nvfp4", "failed"),
                        ("2_quant=mxfp4", None)):
        run = sweep / job / "seed=0"
        run.mkdir(parents=True)
        if status:       # the oldest summaries hold few fields: status is all that is read
            (run / "summary.json").write_text(json.dumps({"status": status}))
    s = SweepDir.read(sweep)
    assert s.runs() == [sweep / "0_quant=bf16" / "seed=0", sweep / "1_quant=nvfp4" / "seed=0"]
    assert s.done() == [sweep / "0_quant=bf16" / "seed=0"]


def test_two_sweeps_of_one_grid_compare_equal_and_another_grid_does_not(tmp_path):
    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    _sweep(a), _sweep(b)
    _sweep(c, {**RAW, "hydra": {**RAW["hydra"], "sweeper": {"params": {"seed": "0"}}}})
    assert SweepDir.read(a).grid == SweepDir.read(b).grid != SweepDir.read(c).grid


def test_an_arm_sweep_named_once_reads_as_the_sweep_ran_it(tmp_path):
    """``arm: ${arm_sweep:}`` (Hydra records it unresolved): the keys of ``arms:``, in order."""
    raw = {**RAW, "arms": {"full": {}, "without_sr": {}, "without_2d": {}},
           "hydra": {"sweeper": {"params": {"seed": "0,1", "arm": "${arm_sweep:}"}},
                     "overrides": {"task": ["+ablation=components"]}}}
    s = SweepDir.read(_sweep(tmp_path, raw))
    assert s.params == {"seed": "0,1", "arm": "full,without_sr,without_2d"}
    assert [j[:2] for j in s.jobs()][:4] == [["seed=0", "arm=full"], ["seed=0", "arm=without_sr"],
                                            ["seed=0", "arm=without_2d"], ["seed=1", "arm=full"]]
