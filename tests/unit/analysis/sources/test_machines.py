"""The machine class of each run and of each sweep: recorded, or from machine_classes.csv."""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from helpers.sweeps import FIXTURE

from nvfp4_lab.analysis.findings.claims import load_sweep
from nvfp4_lab.analysis.reports.index import write_index
from nvfp4_lab.analysis.sources import machines

RESULTS = Path(__file__).parents[4] / "results"
AVX2 = "x86_64 AVX2, AMD family unknown"
AMD512 = "x86_64 AVX512, AMD family 25"
INTEL512 = "x86_64 AVX512, Intel family 6"


def record(folder: Path, runs: str = "*/seed=*", **fields) -> None:
    """Write ``fields`` into the summary.json of every run under ``folder`` matching ``runs``."""
    for path in folder.glob(f"{runs}/summary.json"):
        path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def table(root: Path, rows: dict[str, str]) -> None:
    """``root``'s machine_classes.csv: pattern -> class."""
    with (root / machines.TABLE).open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(machines.COLUMNS)
        w.writerows((p, c, "test") for p, c in rows.items())


@pytest.fixture
def results(tmp_path) -> Path:
    out = tmp_path / "results"
    shutil.copytree(FIXTURE, out)
    return out


def test_every_published_run_has_a_machine_class():
    """Every run under results/ recorded its whole class or has exactly one row of the table;
    every row covers published runs and none of those that recorded their class."""
    rows = machines.Assignments.read(RESULTS / machines.TABLE)
    missing, used = [], set()
    for summary in sorted(RESULTS.rglob("summary.json")):
        recorded = json.loads(summary.read_text()).get("machine_class")
        row = rows.row_for(summary.parent.resolve())
        if machines.whole(recorded):
            assert row is None, f"{summary.parent}: recorded {recorded}, yet row {row.pattern}"
        elif row is None:
            missing.append(str(summary.parent.relative_to(RESULTS)))
        else:
            used.add(row.pattern)
    assert not missing, f"{len(missing)} runs without a machine class, e.g. {missing[:3]}"
    assert used == {r.pattern for r in rows.rows}
    assert all(r.source for r in rows.rows)


@pytest.mark.parametrize("device, classes", [
    ("cpu (x86_64, 1 threads)", {"formats": AVX2, "rht_signs": AMD512}),
    ("cpu (x86_64 AVX512, 1 threads)", {"formats": AMD512, "rht_signs": INTEL512})])
def test_sweeps_whose_coarse_devices_collide_are_named_by_class(results, device, classes):
    """Two sweeps that recorded one coarse device on two boxes: claims.csv and the index's
    scale table name each with the class the table assigns it."""
    for name in classes:
        record(results / name, device=device)
    table(results, {f"{name}/*": c for name, c in classes.items()})
    readme = write_index(results).read_text()
    by_sweep = pd.read_csv(results / "claims.csv").groupby("sweep")["machine"].agg(set)
    for name, c in classes.items():
        assert by_sweep[name] == {c}
        assert f"[{name}]({name}/report.md) | " in readme
        assert f" | {c} | `nvfp4-lab run -m +ablation={name}" in readme


def test_a_sweep_on_two_classes_is_labelled_mixed_with_the_runs_of_each(results):
    sweep = results / "formats"
    record(sweep, device="cpu (x86_64 AVX512, AMD EPYC, 1 threads)", machine_class=AMD512)
    record(sweep, "*/seed=2", device="cpu (x86_64 AVX512, 1 threads)", machine_class=None)
    table(results, {"formats/*/seed=2": INTEL512})
    assert load_sweep(sweep).machine == f"mixed: {AMD512} (8 runs); {INTEL512} (4 runs)"


def test_a_whole_recorded_class_wins_over_the_table_and_a_partial_one_does_not(results):
    sweep = results / "formats"
    record(sweep, "0_*/seed=*", machine_class=AMD512)
    record(sweep, "1_*/seed=*", machine_class="x86_64 AVX2, unknown family unknown")
    table(results, {"formats/*": AVX2})
    got: dict[str, set] = {}
    for run in sweep.glob("*/seed=*"):
        recorded = json.loads((run / "summary.json").read_text()).get("machine_class")
        got.setdefault(run.parent.name[0], set()).add(machines.machine_class(run, recorded))
    assert got == {"0": {AMD512}, "1": {AVX2}, "2": {AVX2}, "3": {AVX2}}


@pytest.mark.parametrize("labels, said", [
    ([AMD512, AMD512], "one machine class"),
    ([AMD512, INTEL512], "different machine classes"),
    ([AVX2, "x86_64 AVX512, AMD family unknown"], "different machine classes"),
    ([AVX2, AVX2], "not known whether one class (part of it not recorded)"),
    (["x86_64 AVX512, AMD family unknown", AMD512],
     "not known whether one class (part of it not recorded)")])
def test_same_claim_in_several_sweeps_says_only_what_the_classes_establish(labels, said):
    assert machines.agreement(labels) == said


def test_a_run_matched_by_two_rows_or_a_malformed_class_is_refused_by_name(results):
    table(results, {"formats/*": AVX2, "formats/0_*": AMD512})
    run = next((results / "formats").glob("0_*/seed=0")).resolve()
    with pytest.raises(ValueError, match=r"formats/0_quant=bf16/seed=0 matches the rows "
                                         r"formats/\*, formats/0_\*"):
        machines.machine_class(run, None)
    table(results, {"formats/*": "AVX2 box"})
    with pytest.raises(ValueError, match="pattern formats/\\*: machine_class 'AVX2 box'"):
        machines.machine_class(run, None)


def test_the_newest_class_is_that_of_the_run_that_finished_last():
    runs = pd.DataFrame({"finished": ["2026-12-07T20:48:01", None, "2026-12-07T22:30:00",
                                      "2026-12-08T01:00:00"],
                         "machine_class": [AMD512, INTEL512, INTEL512, None]})
    assert machines.newest([runs.iloc[:2], runs.iloc[2:]]) == INTEL512
    assert machines.newest([runs.iloc[[0, 1, 3]]]) == AMD512
    assert machines.newest([runs.iloc[[1, 3]]]) is None
    assert machines.newest([]) is None
