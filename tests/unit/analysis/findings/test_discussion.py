"""results/discussion.md's numbers: written from claims.csv, nothing outside a marker."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from nvfp4_lab.analysis.findings import discussion
from nvfp4_lab.analysis.findings.discussion import DiscussionError, refresh, unmarked
from nvfp4_lab.analysis.reports.index import write_index

RESULTS = Path(__file__).resolve().parents[4] / "results"
COLUMNS = ["table", "sweep", "claim", "metric", "n", "mean", "lo", "hi", "verdict", "p_holm",
           "p_bh", "current", "size", "carried_gap", "carried_lo", "carried_hi"]
AS, NC = "as the paper's, carried", "not comparable at this scale"
NAN = float("nan")


def _claims() -> pd.DataFrame:
    """Rows in the claim gap (b - a) / a: positive = the second-named arm worse."""
    rows = [("v1", "formats", "bf16 < nvfp4", "final_val_loss", 3, 1.0033, 0.1286, 1.878,
             "reproduced", 1.0, 0.072, False, AS, 1.2, 0.4, 3.0),
            ("v2", "formats_nano", "bf16 < nvfp4", "final_val_loss", 8, 0.9504, 0.5396,
             1.3612, "reproduced", 0.0004, 0.0001, True, AS, 1.234, 0.456, 3.014),
            ("v2", "formats_nano", "fp8 < nvfp4", "final_val_loss", 8, 0.87, 0.43, 1.31,
             "reproduced", 0.0503, 0.004, True, NAN, NAN, NAN, NAN),
            ("v2", "formats_nano", "bf16 < nvfp4", "tail_train_loss", 8, 1.006, 0.69, 1.33,
             "reproduced", 0.001, 0.001, False, AS, 1.2, 0.4, 3.0),
            ("v2", "cumulative_nano", "3_plus_rht < 2_plus_2d", "final_val_loss", 16, 0.08,
             -0.11, 0.27, "not resolved", 1.0, 1.0, True, NC, NAN, NAN, NAN),
            ("v2", "rht_size_nano", "2 ~ 16", "final_val_loss", 8, 0.05, -0.27, 0.37,
             "equivalent", 0.2, 0.06, True, NAN, NAN, NAN, NAN)]
    return pd.DataFrame(rows, columns=COLUMNS)


@pytest.mark.parametrize(("key", "want"), [
    ("v1 | formats | bf16 < nvfp4 | gap", "+1.00%"),
    ("v1 | formats | bf16 < nvfp4 | interval", "[+0.13, +1.88]"),
    ("v1 | formats | bf16 < nvfp4 | size", "1.00%"),
    ("v1 | formats | bf16 < nvfp4 | size_interval", "[0.13, 1.88]"),
    ("v1 | formats | bf16 < nvfp4 | holm", "survives neither"),
    ("v2 | formats_nano | fp8 < nvfp4 | holm", "BH only"),
    ("v2 | formats_nano | bf16 < nvfp4 | holm", "survives Holm"),
    ("v2 | formats_nano | bf16 < nvfp4 | gap | tail_train_loss", "+1.01%"),
    ("v2 | rht_size_nano | 2 ~ 16 | verdict", "equivalent"),
    ("v2 | rht_size_nano | 2 ~ 16 | n", "8"),
    ("v2 | formats_nano | bf16 < nvfp4 | on_size", AS),
    ("v2 | formats_nano | bf16 < nvfp4 | carried", "+1.23% [+0.46, +3.01]"),
    ("v2 | rht_size_nano | 2 ~ 16 | on_size", "nothing said"),
    ("count | family", "5"),              # the primary rows only
    ("count | current", "4"),
    ("count | current | reproduced", "2"),
    ("count | current | equivalent", "1"),
    ("count | on_size | " + AS, "1"),      # current answers only: v1's row is not one
    ("count | on_size | " + NC, "1"),
])
def test_a_marker_reads_its_row(key, want):
    text = f"a gap of <!--= {key} -->stale<!--/--> here"
    assert refresh(text, _claims()) == f"a gap of <!--= {key} -->{want}<!--/--> here"


@pytest.mark.parametrize("key", ["v1 | formats | bf16 < fp8 | gap",            # no such row
                                 "v1 | formats | bf16 < nvfp4 | mean",         # no such field
                                 "count | everything"])
def test_a_marker_the_table_cannot_fill_stops_the_generator_naming_it(key):
    with pytest.raises(DiscussionError, match=re.escape(key.split(" | ")[0])):
        refresh(f"<!--= {key} -->x<!--/-->", _claims())


def test_a_row_named_twice_is_refused():
    claims = pd.concat([_claims(), _claims().iloc[:1]])
    with pytest.raises(DiscussionError, match="2 rows"):
        refresh("<!--= v1 | formats | bf16 < nvfp4 | gap -->x<!--/-->", claims)


@pytest.mark.parametrize("stale", [
    # the sentences that went stale while written by hand
    "but not once all 47 claims of the page are tested together",
    "FP8 beats NVFP4 by 0.87% ([-1.31, -0.43]), both surviving Holm",
    "E04 branched as the paper's: all five claims resolve, all survive Holm",
    "consistency's first claim: -0.25 [-0.42, -0.09], survives Holm",
])
def test_numbers_outside_a_marker_are_found(stale):
    assert unmarked(f"## Brief\n\n{stale}\n\n{discussion.DATED}\n\n[1.0, 2.0] then") != []


def test_marked_numbers_and_dated_notes_are_not_flagged():
    text = ("Holm runs over all <!--= count | family -->75<!--/--> claims: "
            "<!--= v1 | formats | bf16 < nvfp4 | interval -->[-1.88, -0.13]<!--/--> "
            "(<!--= v1 | formats | bf16 < nvfp4 | holm -->BH only<!--/-->)\n\n"
            f"{discussion.DATED}\n\nseed 0 survives Holm at -0.30% [-0.36, -0.24]")
    assert unmarked(text) == []


def test_the_committed_discussion_is_what_the_index_writes(tmp_path):
    """Its numbers are claims.csv's, none sits outside a marker, and regenerating the index
    from the committed runs leaves the page as committed."""
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    committed = (RESULTS / "discussion.md").read_text()
    assert unmarked(committed) == []
    assert discussion.MARK.search(committed)
    write_index(results)
    assert (results / "discussion.md").read_text() == committed


def test_the_status_lines_quote_the_claims_as_claims_csv_holds_them():
    plan = (RESULTS / "preregistration.md").read_text()
    claims = pd.read_csv(RESULTS / "claims.csv")
    assert discussion.quoted_disagreements(plan, claims) == []
    # the status line as first written, before its correction
    first = plan.replace("-0.25 [-0.42, -0.09], survives BH, not Holm",
                         "-0.25 [-0.42, -0.09], survives Holm")
    assert first != plan
    assert discussion.quoted_disagreements(first, claims) == [
        "-0.25 [-0.42, -0.09], survives Holm: says 'survives Holm', claims.csv: BH only"]


@pytest.mark.parametrize(("status", "why"), [
    ("Status 2026-12-09: `bf16 < nvfp4` -1.00 [-1.50, -0.10] here", "no claim row"),
    ("Status 2026-12-09: -0.95 [-1.36, -0.54], survives neither", "claims.csv: survives Holm"),
])
def test_a_status_line_that_disagrees_is_named(status, why):
    assert why in discussion.quoted_disagreements(status, _claims().assign(
        mean=[-1.0, -0.95, -0.87, -1.0, 0.08, 0.05],
        lo=[-1.88, -1.36, -1.31, -1.33, -0.11, -0.27],
        hi=[-0.13, -0.54, -0.43, -0.69, 0.27, 0.37]))[0]


@pytest.mark.parametrize(("status", "agrees"), [
    # dated before the claim gap turned to (b - a) / a: quoted in the old sign, (a - b) / a
    ("Status 2026-12-06 10:00 UTC: `bf16 < nvfp4` -1.00 [-1.88, -0.13] here", True),
    ("Status 2026-12-06 10:00 UTC: `bf16 < nvfp4` +1.00 [+0.13, +1.88] here", False),
    ("Status 2026-12-07 15:00 UTC: `bf16 < nvfp4` +1.00 [+0.13, +1.88] here", True),
    ("Status 2026-12-08 10:00 UTC: `bf16 < nvfp4` -1.00 [-1.88, -0.13] here", False),
])
def test_a_status_line_is_read_in_the_sign_of_its_day(status, agrees):
    assert (discussion.quoted_disagreements(status, _claims()) == []) == agrees


def test_an_interval_marked_pooled_is_the_earlier_rules_and_left_alone():
    assert discussion.quoted_disagreements(
        "Status 2026-12-04: (pooled [-0.36, +0.13]) and pooled -0.11 [-0.36, +0.13]",
        _claims()) == []
