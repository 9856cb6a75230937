"""Publishing a sweep into results/: only the small files, never over a published folder, a
study grown run by run; unfinished and unknown sweeps refused in one line."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
from helpers.sweeps import make_sweep

from nvfp4_lab.analysis.reports.index import write_index
from nvfp4_lab.analysis.reports.publish import redraw
from nvfp4_lab.analysis.reports.sections import undated
from nvfp4_lab.cli import main

RESULTS = Path(__file__).resolve().parents[4] / "results"


def test_publish_copies_only_the_small_files_and_never_overwrites(tmp_path, capsys):
    sweep = make_sweep(tmp_path)
    results = tmp_path / "results"
    assert main(["publish", str(sweep), "--to", str(results)]) == 0
    dest = results / "formats"
    files = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()}
    runs = {p.relative_to(sweep).as_posix() for p in sweep.glob("*/seed=*")}
    assert {f for f in files if "seed=" in f} == {f"{r}/{n}" for r in runs for n in
                                                  ("config.yaml", "summary.json", "metrics.csv")}
    assert {"multirun.yaml", "sweep_summary.csv", "report.md"} <= files
    assert not any(f.endswith((".ckpt", ".pdf")) or "events" in f for f in files)
    assert (results / "README.md").exists() and "figures/loss.png" in files
    before = (dest / "report.md").read_bytes()
    capsys.readouterr()
    assert main(["publish", str(sweep), "--to", str(results)]) == 2
    err = capsys.readouterr().err
    assert "never overwritten" in err and err.count("\n") == 1
    assert (dest / "report.md").read_bytes() == before


def test_publish_refuses_unfinished_and_unknown_sweeps(tmp_path, capsys):
    sweep = make_sweep(tmp_path, name="quickstart")
    assert main(["publish", str(sweep), "--to", str(tmp_path / "r")]) == 2
    assert "not a paper ablation" in capsys.readouterr().err
    sweep = make_sweep(tmp_path / "b")
    summary = pd.read_csv(sweep / "sweep_summary.csv")
    summary.loc[0, "status"] = "running"
    summary.to_csv(sweep / "sweep_summary.csv", index=False)
    assert main(["publish", str(sweep), "--to", str(tmp_path / "r")]) == 2
    assert "not finished" in capsys.readouterr().err
    assert main(["publish", str(tmp_path / "nothing"), "--to", str(tmp_path / "r")]) == 2
    assert f"{tmp_path / 'nothing'} holds no multirun.yaml: not a sweep directory" in \
        capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_a_study_is_published_as_it_grows(tmp_path, capsys):
    """A study's finished runs are added to its folder session by session: a run not finished
    waits, a run already published is never touched, another grid is refused in one line."""
    sweep = make_sweep(tmp_path, name="scaling", params={"quant": "bf16,fp8,nvfp4,mxfp4",
                                                         "seed": "0,1,2"})
    summaries = sorted(sweep.glob("*/seed=*/summary.json"))
    late, changed = summaries[0], summaries[1]
    first = json.loads(late.read_text())
    late.write_text(json.dumps({**first, "status": "running"}))
    results = tmp_path / "results"
    assert main(["publish", str(sweep), "--to", str(results)]) == 0
    dest = results / "scaling"
    published = {p.relative_to(dest) for p in dest.glob("*/seed=*")}
    assert published == {p.parent.relative_to(sweep) for p in summaries[1:]}
    section = write_index(results).read_text().split("## The scaling study as published")[1]
    assert f"{len(summaries) - 1} of the pre-registered grid's 12 runs published" in section
    before = (dest / changed.relative_to(sweep)).read_bytes()
    late.write_text(json.dumps(first))                        # it finished since
    changed.write_text(json.dumps({**json.loads(changed.read_text()), "final_val_loss": 9.0}))
    assert main(["publish", str(sweep), "--to", str(results)]) == 0
    assert (dest / late.relative_to(sweep)).exists()
    assert (dest / changed.relative_to(sweep)).read_bytes() == before
    other = make_sweep(tmp_path / "other", name="scaling", params={"quant": "bf16,fp8",
                                                                    "seed": "0,1,2"})
    capsys.readouterr()
    assert main(["publish", str(other), "--to", str(results)]) == 2
    err = capsys.readouterr().err
    assert "holds another grid's runs" in err and err.count("\n") == 1


def test_every_published_report_is_what_plot_index_writes_now(tmp_path, monkeypatch):
    """Each report cites what the other published sweeps found of its claims: one published
    later, or a change to the reports, leaves it stale until ``plot --index`` runs again; one
    that is current keeps its file, date included."""
    shutil.copytree(RESULTS, tmp_path / "results",
                    ignore=shutil.ignore_patterns("*.png", "*.pdf"))
    monkeypatch.chdir(tmp_path)
    stale = Path("results/scaling/report.md")       # as if a run had been published since
    stale.write_text(stale.read_text().replace("runs finished", "runs done", 1))
    written = redraw(Path("results"))
    assert len(written) == len(list(RESULTS.rglob("report.md"))) > 20
    assert [report for report, changed in written.items() if changed] == [stale]
    for report in written:
        for new in [report, *sorted((report.parent / "tables").glob("*.csv"))]:
            old = RESULTS / new.relative_to("results")
            as_is = undated if new == stale else str     # the stale one is drawn anew, dated now
            assert as_is(new.read_text()) == as_is(old.read_text()), \
                f"{old} differs from what the code writes now: nvfp4-lab plot --index results/"


def test_a_runs_downstream_scores_are_published_with_it(tmp_path):
    """A run's eval.json (nvfp4-lab eval) goes with its small files, so the published report
    keeps its downstream section; runs never scored publish without one."""
    sweep = make_sweep(tmp_path)
    scored = next(sweep.glob("*_quant=nvfp4/seed=0"))
    task = {"acc": 0.4, "acc_stderr": 0.01, "n": 1000, "step": 40, "lm_eval": "0.4.13",
            "chance": 0.25}
    (scored / "eval.json").write_text(json.dumps({"quantized": {"arc": task}}))
    results = tmp_path / "results"
    assert main(["publish", str(sweep), "--to", str(results)]) == 0
    dest = results / "formats"
    published = {p.parent.relative_to(dest) for p in dest.rglob("eval.json")}
    assert published == {scored.relative_to(sweep)}
    assert (dest / scored.relative_to(sweep) / "eval.json").read_bytes() == \
        (scored / "eval.json").read_bytes()
    assert "## Downstream tasks" in (dest / "report.md").read_text()
