"""results/README.md: regenerated from the committed fixture tests/assets/results and checked
against a hand calculation from its sweep_summary.csv files (numpy and a printed t table, not
analysis.stats); publishing copies only the small files and never overwrites."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from nvfp4_lab.analysis.index import ABLATIONS, BEYOND_PAPER, claim_verdict, write_index
from nvfp4_lab.analysis.paper import Claim, load_paper
from nvfp4_lab.cli import main

FIXTURE = Path(__file__).parents[2] / "assets" / "results"
RESULTS = Path(__file__).parents[3] / "results"
PUBLISHED = sorted(p.parent.name for p in RESULTS.glob("*/multirun.yaml"))
T975 = {2: 4.302652729911275, 3: 3.182446305284263, 4: 2.776445105197799}  # t_{0.975, df}


@pytest.fixture
def results(tmp_path) -> Path:
    out = tmp_path / "results"
    shutil.copytree(FIXTURE, out)
    return out


def rows(readme: str) -> dict[tuple[str, str], list[str]]:
    """(ablation, claim) -> the table row's cells."""
    out, ablation = {}, None
    for line in readme.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != 6 or not cells[2].startswith("`"):
            continue
        m = re.match(r"\[?(\w+)", cells[0])
        ablation = m[1] if m else ablation
        out[(ablation, cells[2].strip("`"))] = cells
    return out


def job_label(job: str) -> str:
    """The swept value in a job directory name: ``3_+scale=lab,arm=base/seed=0`` -> base."""
    overrides = job.split("/")[0].split("_", 1)[1].split(",")
    return [o for o in overrides if not o.startswith("+")][0].split("=", 1)[1]


def hand_gap(summary: pd.DataFrame, better: str, worse: str) -> tuple[float, ...]:
    """Mean and 95% interval of (loss_better - loss_worse) / loss_better * 100 over seeds."""
    done = summary[summary["status"] == "done"].assign(label=summary["job"].map(job_label))
    loss = done.pivot_table(index="seed", columns="label", values="final_val_loss")
    gaps = ((loss[better] - loss[worse]) / loss[better] * 100).dropna().to_numpy()
    half = T975[len(gaps) - 1] * gaps.std(ddof=1) / np.sqrt(len(gaps))
    return gaps.mean(), gaps.mean() - half, gaps.mean() + half


def check_rows(results: Path, ablation: str, table: dict) -> None:
    """Every claim row of ``ablation`` against the hand calculation from its CSV."""
    summary = pd.read_csv(results / ablation / "sweep_summary.csv")
    labels = set(summary["job"].map(job_label))
    for claim in load_paper(ablation).claims:
        cells = table[(ablation, str(claim))]
        if not {claim.better, claim.worse} <= labels:
            assert cells[5] == "**not run**"
            continue
        failed = summary[summary["job"].map(job_label).isin([claim.better, claim.worse])
                         & (summary["status"] != "done")]
        if len(failed):
            assert cells[4].startswith("diverged") or "seeds" in cells[4]
            continue
        mean, lo, hi = hand_gap(summary, claim.better, claim.worse)
        assert cells[4] == f"{mean:+.2f} [{lo:+.2f}, {hi:+.2f}], 3 seeds"
        if claim.same:
            expected = "consistent" if lo <= 0 <= hi else "contradicted"
        else:
            expected = "reproduced" if hi < 0 else "contradicted" if lo > 0 else "not resolved"
        assert cells[5] == f"**{expected}**"


def test_formats_rows_match_a_hand_calculation(results):
    table = rows(write_index(results).read_text())
    check_rows(results, "formats", table)
    # the fixture was made to have one of each: check the hand calculation saw them too
    assert table[("formats", "bf16 < nvfp4")][5] == "**reproduced**"
    assert table[("formats", "nvfp4 < mxfp4")][5] == "**not resolved**"


def test_null_claim_and_diverged_arm(results):
    table = rows(write_index(results).read_text())
    summary = pd.read_csv(results / "rht_signs" / "sweep_summary.csv")
    signs = summary["job"].map(job_label)
    mean, lo, hi = hand_gap(summary, "none", "fixed")
    assert table[("rht_signs", "none ~ fixed")][4].startswith(f"{mean:+.2f} [{lo:+.2f}, ")
    assert lo < 0 < hi and table[("rht_signs", "none ~ fixed")][5] == "**consistent**"
    assert (summary.loc[signs == "per_call", "status"] == "diverged").all()
    assert table[("rht_signs", "per_call ~ fixed")][4] == "diverged: per_call"
    assert table[("rht_signs", "per_call ~ fixed")][5] == "**contradicted**"


def test_unpublished_ablations_are_pending_with_their_claims(results):
    readme = (write_index(results)).read_text()
    published = {p.name for p in results.iterdir() if (p / "multirun.yaml").exists()}
    assert published == {"formats", "rht_signs"}
    for name in ABLATIONS:
        line = next(li for li in readme.splitlines() if re.match(rf"\| \[?{name}\b", li))
        assert ("**pending**" in line) == (name not in published)
        if name not in published:
            assert all(f"`{c}`" in line for c in load_paper(name).claims)
    assert "Fixture scale." in readme          # the preregistration is included verbatim
    assert f"2 of {len(ABLATIONS)} ablations published" in readme
    assert "claims: 1 reproduced, 1 consistent, 1 not resolved, 1 contradicted." in readme


@pytest.mark.parametrize("ablation", PUBLISHED)
def test_published_results_match_a_hand_calculation(ablation, tmp_path):
    """The committed results: every claim row recomputed from the committed sweep_summary.csv
    (itself checked against the runs' summary.json files)."""
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    summary = pd.read_csv(results / ablation / "sweep_summary.csv")
    for job, loss in zip(summary["job"], summary["final_val_loss"]):
        run = yaml.safe_load((results / ablation / job / "summary.json").read_text())
        assert run.get("final_val_loss") == pytest.approx(loss, rel=1e-12, nan_ok=True)
    check_rows(results, ablation, rows(write_index(results).read_text()))


def test_committed_index_is_regenerated_from_the_committed_runs(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    assert write_index(results).read_text() == (RESULTS / "README.md").read_text()


@pytest.mark.parametrize("same, lo, hi, verdict", [
    (False, -2.0, -0.1, "reproduced"), (False, -2.0, 0.5, "not resolved"),
    (False, 0.1, 2.0, "contradicted"), (True, -0.3, 0.3, "consistent"),
    (True, 0.1, 0.3, "contradicted"), (True, -0.5, -0.2, "contradicted"),
])
def test_claim_verdict(same, lo, hi, verdict):
    assert claim_verdict(Claim("a", "b", same), lo, hi) == verdict


def make_sweep(tmp_path: Path, name: str = "formats") -> Path:
    """The fixture's formats runs as a raw sweep: plus checkpoints and event files."""
    sweep = tmp_path / "sweep"
    shutil.copytree(FIXTURE / "formats", sweep)
    raw = yaml.safe_load((sweep / "multirun.yaml").read_text())
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({**raw, "name": name}))
    for run in sweep.glob("*/seed=*"):
        (run / "checkpoints").mkdir()
        (run / "checkpoints" / "last.ckpt").write_bytes(b"x" * 100)
        (run / "logs" / "tb").mkdir(parents=True)
        (run / "logs" / "tb" / "events.out").write_bytes(b"x")
    return sweep


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
    assert not (tmp_path / "r").exists()


def test_comparisons_beyond_the_paper_are_published_and_indexed(results, tmp_path):
    """The recipes sweep is pending with its claims, then, published (the fixture's formats
    runs under its name: its claims on arms it lacks are not run), checked like an ablation."""
    assert BEYOND_PAPER == ("recipes",)
    pending = next(li for li in write_index(results).read_text().splitlines()
                   if li.startswith("| recipes |"))
    assert "**pending**" in pending
    assert all(f"`{c}`" in pending for c in load_paper("recipes").claims)
    assert main(["publish", str(make_sweep(tmp_path, name="recipes")), "--to",
                 str(results)]) == 0
    readme = write_index(results).read_text()
    check_rows(results, "recipes", rows(readme))
    assert "1 of 1 published; claims: 1 reproduced, 1 not resolved, 2 not run." in readme
    # the paper's table and tally are the ablations' alone
    assert f"2 of {len(ABLATIONS)} ablations published" in readme
    assert "claims: 1 reproduced, 1 consistent, 1 not resolved, 1 contradicted." in readme


def test_index_of_a_missing_directory_is_one_line(tmp_path, capsys):
    assert main(["plot", "--index", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope" in err
