"""The paper's numbers in nvfp4_lab/paper/: every file loads, names only labels its ablation sweeps,
and the loader refuses malformed files; the ordering check on hand-made cases."""
from __future__ import annotations

import math
import re

import pytest
import yaml

from nvfp4_lab.analysis.reports.publish import STUDIES
from nvfp4_lab.analysis.sources.paper import (
    GAP_METRICS,
    PaperResult,
    load_all,
    load_paper,
    paper_ordering_agrees,
)
from nvfp4_lab.configs import conf_dir, paper_dir
from nvfp4_lab.sweepdir import sweep_params

CONF = conf_dir()
ABLATIONS = sorted(p.stem for p in (CONF / "ablation").glob("*.yaml"))
# the studies' paper numbers are the runs they extrapolate to (analysis/laws/extrapolation.py,
# PAPER_RUNS)
WITH_PAPER = [a for a in ABLATIONS if a != "smoke" and a not in STUDIES]
PAPER_FILES = sorted(p.stem for p in paper_dir().glob("*.yaml"))


def ablation_yaml(name: str) -> dict:
    return yaml.safe_load((CONF / "ablation" / f"{name}.yaml").read_text())


def swept(name: str, axis: str) -> list[str]:
    """The labels an ablation sweeps along ``axis`` (the comma-separated sweeper values)."""
    params = sweep_params(CONF / "ablation" / f"{name}.yaml")
    assert axis in params, f"{name}: the paper file's axis {axis!r} is not swept"
    return [v.strip() for v in str(params[axis]).split(",")]


def test_paper_dir_is_the_packages_and_not_a_config_group():
    assert paper_dir() == CONF.parent / "paper" and paper_dir().is_dir()
    assert not (CONF / "paper").exists()          # run --help lists config groups only


@pytest.mark.parametrize("ablation", PAPER_FILES)
def test_every_paper_file_loads(ablation):
    paper = load_paper(ablation)
    assert isinstance(paper, PaperResult) and paper.ablation == ablation
    assert ablation in ABLATIONS, f"nvfp4_lab/paper/{ablation}.yaml has no conf/ablation file"
    assert paper.values and paper.finding and paper.scale
    assert re.fullmatch(r"E\d\d[a-c]?(/E\d\d[a-c]?)*", paper.experiment)
    assert load_all()[ablation] == paper


def test_every_ablation_but_smoke_has_a_paper_file():
    """Named by the ablation's ``name`` (formats_v2 is the formats ablation's design v2)."""
    assert set(PAPER_FILES) == {ablation_yaml(a)["name"] for a in WITH_PAPER}
    assert load_paper("smoke") is None and STUDIES == ("scaling", "steps_vs_size")
    assert all(load_paper(study) is None for study in STUDIES)


@pytest.mark.parametrize("ablation", PAPER_FILES)
def test_labels_are_swept_values(ablation):
    paper = load_paper(ablation)
    labels = swept(ablation, paper.axis)
    if paper.axis == "arm":
        assert labels == list(ablation_yaml(ablation)["arms"])
    used = {*paper.values, *paper.source, *paper.outcomes, *(paper.ordering or []),
            *(label for c in paper.claims for label in (c.better, c.worse))}
    if paper.baseline is not None:
        used.add(paper.baseline)
    used.add(paper.reference)
    assert used <= set(labels), f"{ablation}: not swept: {sorted(used - set(labels))}"


@pytest.mark.parametrize("ablation", PAPER_FILES)
def test_metric_units(ablation):
    paper = load_paper(ablation)
    if paper.metric in GAP_METRICS:
        if paper.baseline is not None:
            assert paper.values.get(paper.baseline, 0.0) == 0.0
        assert all(-0.5 <= v < 10 for v in paper.values.values())   # percent, positive = worse
    elif paper.metric in ("val_loss", "train_loss"):
        assert paper.baseline is None
        assert all(0.5 < v < 5 for v in paper.values.values())      # nats per token
    else:
        assert all(v > 0 for v in paper.values.values())
    if paper.ordering is not None:                                  # best first = lowest loss
        v = [paper.values[label] for label in paper.ordering]     # a gap: lower is better too
        assert v == sorted(v), f"{ablation}: ordering does not follow the values"


@pytest.mark.parametrize("ablation", PAPER_FILES)
def test_gaps_are_read_once_with_the_labs_sign(ablation):
    """A file stores the paper's gaps as it prints them, (ref - exp) / ref (negative = worse);
    read, they are the lab's (exp - ref) / ref (positive = worse), every value and inferred
    one turned once; a loss or a multiplier is read as it is."""
    raw = yaml.safe_load((paper_dir() / f"{ablation}.yaml").read_text())
    paper = load_paper(ablation)
    sign = -1.0 if raw["metric"] in GAP_METRICS else 1.0
    for stored, read in ((raw["values"], paper.values),
                         (raw.get("inferred") or {}, paper.inferred)):
        assert {str(k): sign * v for k, v in stored.items()} == read
    if raw["metric"] in GAP_METRICS:
        assert all(math.copysign(1, v) > 0 for v in paper.values.values() if v == 0)   # +0.0


@pytest.mark.parametrize("ablation", PAPER_FILES)
def test_claims_agree_with_the_papers_own_numbers(ablation):
    """A claim never says more than the file's numbers: "a < b" needs a lower loss for a (a
    larger gap), or b diverging where a converged; "a ~ b" equal values unless the file's
    ordering is null (a difference the paper saw only at a larger scale)."""
    paper = load_paper(ablation)
    for c in paper.claims:
        a, b = paper.values.get(c.better), paper.values.get(c.worse)
        if c.same:
            if paper.ordering is not None and a is not None and b is not None:
                assert a == b, f"{ablation}: {c} but the values differ"
        elif a is not None and b is not None:
            assert a < b, f"{ablation}: {c} against the values {a}, {b}"
        elif c.worse in paper.outcomes:
            assert "diverges" in paper.outcomes[c.worse], f"{ablation}: {c}"
            assert "diverges" not in paper.outcomes.get(c.better, ""), f"{ablation}: {c}"


def test_malformed_claims_are_refused(tmp_path):
    good = yaml.safe_load((paper_dir() / "formats.yaml").read_text())
    for bad in (["bf16 > nvfp4"], ["bf16 < bf16"], [], "bf16 < nvfp4", ["bf16<"]):
        (tmp_path / "formats.yaml").write_text(yaml.safe_dump({**good, "claims": bad}))
        with pytest.raises(ValueError, match="'claims'"):
            load_paper("formats", tmp_path)


def test_counted_in_names_a_claim_another_file_states(tmp_path):
    """Every ``counted_in`` maps a paper claim of its file to a claim that the named file
    states; a malformed one is refused, naming the key."""
    papers = load_all()
    for name, paper in papers.items():
        for claim, stated in paper.counted_in.items():
            owner, _, text = stated.partition(": ")
            assert text in {str(c) for c in papers[owner].claims if c.kind == "paper"}, name
            assert claim in {str(c) for c in paper.claims}, name
    good = yaml.safe_load((paper_dir() / "cumulative.yaml").read_text())
    for bad in ({"bf16 < 4_plus_sr": "formats bf16 < nvfp4"}, {"bf16 < base": "formats: a < b"}):
        (tmp_path / "cumulative.yaml").write_text(yaml.safe_dump({**good, "counted_in": bad}))
        with pytest.raises(ValueError, match="'counted_in'"):
            load_paper("cumulative", tmp_path)


@pytest.mark.parametrize("ablation", WITH_PAPER)
def test_ablation_header_lists_report_figures(ablation):
    lines = (CONF / "ablation" / f"{ablation}.yaml").read_text().splitlines()
    header = [line for line in lines if line.startswith("# Report figures: ")]
    assert len(header) == 1
    figures = header[0].removeprefix("# Report figures: ").split(", ")
    assert figures[0] == "loss.png" and "loss_gap.png" in figures
    assert ("paper_vs_ours.png" in figures) == (ablation_yaml(ablation)["name"] in PAPER_FILES)
    assert ("layer_error.png" in figures) == (ablation == "bf16_layers")
    assert ("token_efficiency.png" in figures) == (ablation == "token_efficiency")
    i = lines.index(header[0])
    assert all(line.startswith("#") for line in lines[:i]) and not lines[i + 1].startswith("#")


def make(ordering, values) -> PaperResult:
    return PaperResult("x", "E00", "Fig. 0", "-", "val_loss", None, "a", "arm", "-",
                       ordering, values, {k: "read" for k in values}, [])


def test_ordering_agrees():
    paper = make(["a", "b", "c"], {"a": 1.0, "b": 2.0, "c": 3.0})
    assert paper_ordering_agrees(paper, {"a": 3.1, "b": 3.2, "c": 3.3, "z": 0.0}) is True
    assert paper_ordering_agrees(paper, {"a": 3.1, "c": 3.3}) is True          # subset
    assert paper_ordering_agrees(paper, {"a": 3.2, "b": 3.1, "c": 3.3}) is False
    assert paper_ordering_agrees(paper, {"a": math.nan, "b": 3.1}) is False    # diverged: worst
    assert paper_ordering_agrees(paper, {"a": 3.1}) is None                    # < 2 common
    assert paper_ordering_agrees(paper, {"z": 3.1, "y": 3.2}) is None
    assert paper_ordering_agrees(make(None, {"a": 1.0, "b": 1.0}), {"a": 1, "b": 2}) is None


def test_ordering_ties_in_the_paper_are_not_an_order():
    paper = make(["a", "b", "c"], {"a": 1.0, "b": 1.0, "c": 3.0})
    assert paper_ordering_agrees(paper, {"a": 3.2, "b": 3.1, "c": 3.3}) is True
    assert paper_ordering_agrees(paper, {"a": 3.2, "b": 3.1}) is None          # only a tie
    assert paper_ordering_agrees(paper, {"a": 3.4, "b": 3.1, "c": 3.3}) is False


GOOD = {"experiment": "E03", "figure": "Fig. 6a", "scale": "8B", "metric": "train_loss_gap_pct",
        "baseline": "bf16", "reference": "bf16", "axis": "quant", "finding": "f",
        "ordering": ["bf16", "nvfp4"],
        "values": {"bf16": 0.0, "nvfp4": -1.5}, "source": {"bf16": "read", "nvfp4": "read"},
        "claims": ["bf16 < nvfp4"]}


@pytest.mark.parametrize("change, key", [
    ({"metric": "perplexity"}, "metric"),
    ({"colour": "red"}, "colour"),
    ({"ordering": ["bf16"]}, "ordering"),
    ({"ordering": ["bf16", "nvfp4", "mxfp4"]}, "ordering"),
    ({"source": {"bf16": "read", "nvfp4": "guessed"}}, "source"),
    ({"source": {"bf16": "read"}}, "source"),
    ({"values": {"bf16": 0.1, "nvfp4": -1.5}}, "values"),
    ({"values": {"bf16": 0.0, "nvfp4": "low"}}, "values"),
    ({"metric": "val_loss", "values": {"bf16": 1.2, "nvfp4": 1.3}}, "baseline"),
    ({"outcomes": ["diverges"]}, "outcomes"),
    ({"figure": None}, "figure"),
    ({"finding": None, "_drop": "finding"}, "finding"),
])
def test_malformed_file_names_the_key(tmp_path, change, key):
    raw = {**GOOD, **change}
    if "_drop" in change:
        del raw[raw.pop("_drop")]
    (tmp_path / "formats.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True))
    with pytest.raises(ValueError, match=rf"formats\.yaml: .*'{key}'"):
        load_paper("formats", directory=tmp_path)


def test_good_file_in_another_directory(tmp_path):
    (tmp_path / "formats.yaml").write_text(yaml.safe_dump(GOOD))
    paper = load_paper("formats", directory=tmp_path)
    assert paper.values == {"bf16": 0.0, "nvfp4": 1.5} and paper.outcomes == {}   # lab's sign
    assert load_paper("components", directory=tmp_path) is None
