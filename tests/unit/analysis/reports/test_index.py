"""results/README.md: every claim row re-derived from the runs' own summary.json files by an
oracle written here (numpy, scipy's t distribution, Holm's formula), not by the library's
statistics, verdicts or claims; the committed index regenerated exactly; published sweeps of
every kind (beyond the paper, design v2) indexed where they belong; each finding counted
once."""
from __future__ import annotations

import csv
import dataclasses
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.laws import law
from helpers.sweeps import FIXTURE, make_sweep
from scipy import stats

from nvfp4_lab.analysis.findings import claims
from nvfp4_lab.analysis.findings.claims import ClaimResult, Table, load_sweep
from nvfp4_lab.analysis.inference import verdicts
from nvfp4_lab.analysis.laws import carry, steps_law
from nvfp4_lab.analysis.reports import paper_figures
from nvfp4_lab.analysis.reports.index import FOREST_CAPTION, forest_table, write_index
from nvfp4_lab.analysis.reports.publish import ABLATIONS, BEYOND_PAPER
from nvfp4_lab.analysis.sources.paper import Claim, load_paper
from nvfp4_lab.cli import main

RESULTS = Path(__file__).parents[4] / "results"
MARGIN = 0.5            # the TOST margin of results/preregistration.md


@pytest.fixture
def results(tmp_path) -> Path:
    out = tmp_path / "results"
    shutil.copytree(FIXTURE, out)
    return out


def rows(readme: str) -> dict[tuple[str, str, str], list[str]]:
    """(section, sweep, claim) -> the claim row's cells, for every claim table of the page."""
    out, sweep, section = {}, None, ""
    for line in readme.splitlines():
        if line.startswith("## "):
            section = line.lstrip("# ")
        elif line.startswith("### ") and "averaged" in line:     # design v2's second metric
            section = "Design-tail"
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != 8 or not cells[2].startswith("`"):
            continue
        m = re.match(r"\[?(\w+)", cells[0])
        sweep = m[1] if m else sweep
        out[(section.split(" ")[0], sweep, cells[2].strip("`"))] = cells
    return out


def labelled_losses(folder: Path, axis: str, metric: str = "final_val_loss") -> pd.DataFrame:
    """seed x label table of ``metric`` from the runs' summary.json (label: the job
    directory's value of the paper's axis), plus which labels are BF16."""
    recs = []
    for summary in folder.glob("*/seed=*/summary.json"):
        s = json.loads(summary.read_text())
        over = dict(o.split("=", 1) for o in summary.parent.parent.name.split("_", 1)[1].split(",")
                    if not o.startswith("+"))
        label = over[axis] if axis in over else s["arm"] or s["quant"]
        if s["status"] == "done":
            recs.append({"seed": s["seed"], "label": label, "loss": s[metric],
                         "bf16": s["quant"] == "bf16"})
    return pd.DataFrame(recs)


def paper_gap(paper, better: str, worse: str) -> float | None:
    known = {**paper.inferred, **paper.values}
    if better not in known or worse not in known:
        return None
    a, b = known[better], known[worse]
    if paper.metric.endswith("gap_pct"):      # as read: g % more loss than the reference
        a, b = 1 + a / 100, 1 + b / 100
    return (b - a) / a * 100                  # positive = b, the second-named arm, worse


def oracle(folder: Path) -> list[dict]:
    """Every claim of the sweep in ``folder``: gaps, own interval, verdict, p."""
    name = yaml.safe_load((folder / "multirun.yaml").read_text())["name"]
    paper = load_paper(name)
    runs = labelled_losses(folder, paper.axis)
    loss = runs.pivot_table(index="seed", columns="label", values="loss")
    out = []
    for c in paper.claims:
        row = {"claim": str(c), "same": c.same, "paper_gap": paper_gap(paper, c.better, c.worse)}
        if not {c.better, c.worse} <= set(loss.columns):
            row["gaps"] = None
        else:
            pair = loss[[c.better, c.worse]].dropna()
            row["gaps"] = ((pair[c.worse] - pair[c.better]) / pair[c.better] * 100).to_numpy()
        out.append(row)
    for r in out:
        if r["gaps"] is not None and len(r["gaps"]) >= 2 and r["gaps"].var() > 0:
            g = r["gaps"]
            n, m, sd = len(g), g.mean(), g.std(ddof=1)
            se, dof = sd / math.sqrt(n), n - 1          # each claim its own spread
            half = stats.t.ppf(0.975, dof) * se
            lo, hi = m - half, m + half
            r["own"] = (m, lo, hi)
            p_tost = max(stats.t.sf((m + MARGIN) / se, dof), stats.t.cdf((m - MARGIN) / se, dof))
            p0 = 2 * stats.t.sf(abs(m) / se, dof)
            if r["same"]:       # TOST first: its 90% interval inside the margin is equivalent
                word = ("equivalent" if p_tost < 0.05 else
                        "contradicted" if lo > 0 or hi < 0 else "not resolved")
                r["p"] = p0 if word == "contradicted" else p_tost
            else:
                word = "reproduced" if lo > 0 else "contradicted" if hi < 0 else "not resolved"
                r["p"] = p0
            r["verdict"] = word
            r["sd"] = sd
    for r in out:
        if r["gaps"] is not None and len(r["gaps"]) and np.all(r["gaps"] == 0):
            r["verdict"] = "not testable"
    return out


def fresh_seeds(r: dict, cells: list[str]) -> str:
    """Amendment 10's cell: TOST's seeds for a null; else the seeds at the paper's gap carried,
    where the row's notes carry it, or at the margin; never at the measured gap."""
    if r["same"]:
        return f"{seeds(0.0, r['sd'], True)} (TOST ±{MARGIN})"
    carried = re.search(r"carried ([+-]\d+\.\d+)\)$", cells[7])
    if carried:
        noted = re.search(r"paper's size: \*[^*]+\* \(([+-]\d+\.\d+)", cells[6])[1]
        assert float(noted) == pytest.approx(float(carried[1]), abs=0.006), cells
        return f"{seeds(float(carried[1]), r['sd'], False)} (paper's, carried {carried[1]})"
    return f"{seeds(MARGIN, r['sd'], False)} (margin +{MARGIN})"


def seeds(gap: float | None, sd: float, same: bool) -> str:
    """The smallest n with 80% power (noncentral t; TOST's for a null), by linear search."""
    if not sd > 0 or (not same and not gap):
        return "—"
    for n in range(2, 10_001):
        df, nc = n - 1, (0.5 if same else abs(gap)) * math.sqrt(n) / sd
        if same:
            power = 1 - 2 * stats.nct.cdf(stats.t.ppf(0.95, df), df, nc)
        else:
            c = stats.t.ppf(0.975, df)
            low = stats.nct.cdf(-c, df, nc)     # NaN from scipy where it is below 1e-20
            power = stats.nct.sf(c, df, nc) + (0.0 if math.isnan(low) else low)
        if power >= 0.8:
            return str(n)
    return "> 10000"


def holm(p: list[float]) -> list[float]:
    order = sorted(range(len(p)), key=lambda i: p[i])
    adjusted, running = [0.0] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def bh(p: list[float]) -> list[float]:
    order = sorted(range(len(p)), key=lambda i: p[i], reverse=True)
    adjusted, running = [0.0] * len(p), 1.0
    for rank, i in enumerate(order):
        running = min(running, len(p) * p[i] / (len(p) - rank))
        adjusted[i] = running
    return adjusted


def check_page(results: Path, readme: str) -> int:
    """Every tested claim row of the page against the oracle; returns how many were checked."""
    table = rows(readme)
    folders = [("Findings", results / a) for a in ABLATIONS] + \
              [("Beyond", results / b) for b in BEYOND_PAPER] + \
              [("v2", f) for f in sorted((results / "v2").glob("*"))]
    checked = [(sec, f, r) for sec, f in folders if (f / "multirun.yaml").exists()
               for r in oracle(f) if "verdict" in r]
    for sec, folder, r in checked:        # the same runs as a claim before it: its verdict
        cells = next(table[k] for k in table if k[1] == folder.name and k[2] == r["claim"]
                     and (sec == "v2") == (k[0] == "Design"))
        same = re.search(r"same runs as (\w+): ([^;:]+): its verdict", cells[6])
        if same:
            orig = next(o for _, f, o in checked if f.name == same[1] and o["claim"] == same[2])
            r["verdict"], r["p"] = orig["verdict"], orig.get("p")
    p = [r["p"] for _, _, r in checked if r["verdict"] != "not testable"]
    it = iter(zip(holm(p), bh(p)))
    for sec, folder, r in checked:
        key = next(k for k in table if k[1] == folder.name and k[2] == r["claim"]
                   and (sec == "v2") == (k[0] == "Design"))
        cells = table[key]
        assert cells[5] == f"**{r['verdict']}**", (folder.name, r["claim"])
        if r["verdict"] == "not testable":
            continue
        m, lo, hi = r["own"]
        ours = f"{m:+.2f} [{lo:+.2f}, {hi:+.2f}]"
        assert cells[4] == f"{ours}, {len(r['gaps'])} seeds", (folder.name, r["claim"])
        assert cells[7] == fresh_seeds(r, cells), (folder.name, r["claim"])
        h, b = next(it)
        if r["verdict"] in ("reproduced", "equivalent", "contradicted") and sec != "v2":
            assert ("survives Holm" in cells[6]) == (h < 0.05), (folder.name, r["claim"], h)
            assert ("survives BH, not Holm" in cells[6]) == (b < 0.05 <= h), (folder.name, b)
    return len(checked)


def test_fixture_rows_match_the_oracle(results):
    readme = write_index(results).read_text()
    assert check_page(results, readme) == 4 + 1      # rht_signs: per_call diverged
    table = rows(readme)
    # the fixture was made to have a resolved and an unresolved format claim
    assert table[("Findings", "formats", "bf16 < nvfp4")][5] == "**reproduced**"
    assert "ours: not the paper's" in table[("Findings", "formats", "bf16 < fp8")][6]


def test_diverged_arm(results):
    table = rows(write_index(results).read_text())
    summary = pd.read_csv(results / "rht_signs" / "sweep_summary.csv")
    assert (summary.loc[summary["job"].str.contains("per_call"), "status"] == "diverged").all()
    assert table[("Findings", "rht_signs", "per_call ~ fixed")][4] == "diverged: per_call"
    assert table[("Findings", "rht_signs", "per_call ~ fixed")][5] == "**contradicted**"


def test_unpublished_ablations_are_pending_with_their_claims(results):
    readme = (write_index(results)).read_text()
    published = {p.name for p in results.iterdir() if (p / "multirun.yaml").exists()}
    assert published == {"formats", "rht_signs"}
    for name in ABLATIONS:
        line = next(li for li in readme.splitlines() if re.match(rf"\| \[?{name}\b", li))
        assert ("**pending**" in line) == (name not in published)
        if name not in published:
            assert all(f"`{c}`" in line for c in load_paper(name).claims)
    assert "Fixture scale." not in readme      # the plan is linked, not inlined
    assert "[the plan, fixed before the runs, and its amendments](preregistration.md)" in readme
    assert f"2 of {len(ABLATIONS)} ablations published" in readme
    assert _headline(readme) == ("5", "2 reproduced, 1 equivalent, 1 not resolved, "
                                 "1 contradicted")


def test_degenerate_and_duplicated_claims_are_not_counted(results):
    """An arm made bit-identical to another is not testable; the same runs published under a
    second sweep count once; sizes and ours are counted apart."""
    summary_path = next(results.glob("formats/3_quant=mxfp4/seed=*/summary.json")).parent.parent
    for run in summary_path.glob("seed=*"):
        twin = results / "formats" / "2_quant=nvfp4" / run.name / "summary.json"
        s = json.loads((run / "summary.json").read_text())
        s["final_val_loss"] = json.loads(twin.read_text())["final_val_loss"]
        (run / "summary.json").write_text(json.dumps(s))
    shutil.copytree(results / "formats", results / "recipes")
    raw = yaml.safe_load((results / "recipes" / "multirun.yaml").read_text())
    (results / "recipes" / "multirun.yaml").write_text(yaml.safe_dump({**raw, "name": "recipes"}))
    readme = write_index(results).read_text()
    table = rows(readme)
    assert table[("Findings", "formats", "nvfp4 < mxfp4")][5] == "**not testable**"
    assert table[("Beyond", "recipes", "nvfp4 < mxfp4")][5] == "**not testable**"
    assert "same runs as formats: bf16 < nvfp4" in table[("Beyond", "recipes", "bf16 < nvfp4")][6]
    head = _summary(readme)
    # formats: bf16 < nvfp4 and fp8 < nvfp4 counted (nvfp4 < mxfp4 not testable); rht_signs' 2
    assert _headline(readme)[0] == "4" and "ours: " in head
    check_page(results, readme)


@pytest.mark.parametrize("published", [True])
def test_committed_results_match_the_oracle(published, tmp_path):
    """The committed results: every tested claim row recomputed from the committed runs."""
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    assert check_page(results, write_index(results).read_text()) >= 45


def test_runs_last_evaluated_before_their_end_are_flagged():
    """From the committed metrics.csv files: every label with a run whose last validation
    step is before its last step is named in each of its claims' notes (token_efficiency's
    816-step arm was evaluated at 800, before runs always evaluated at their end)."""
    readme = (RESULTS / "README.md").read_text()
    late = set()
    for metrics in RESULTS.glob("*/*/seed=*/metrics.csv"):
        m = pd.read_csv(metrics, usecols=["step", "val_loss"])
        steps = json.loads((metrics.parent / "summary.json").read_text())["steps"]
        if m.dropna()["step"].max() < steps:
            late.add((metrics.parents[2].name, metrics.parents[1].name.split("=")[-1]))
    assert ("token_efficiency", "mxfp4_1.36x") in late
    for sweep, label in late:
        for cells in (c for k, c in rows(readme).items() if k[1] == sweep and label in k[2]):
            assert f"{label} last evaluated at step" in cells[6]


def test_committed_index_is_regenerated_from_the_committed_runs(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    committed = (RESULTS / "README.md").read_text()
    assert write_index(results).read_text() == committed


def test_fresh_seeds_are_priced_on_the_class_of_the_newest_published_run():
    """Whatever machine draws the page: the class recorded by the run that finished last."""
    finished = [json.loads(p.read_text()) for p in RESULTS.rglob("summary.json")
                if "pending" not in p.relative_to(RESULTS).parts]     # not published
    newest = max((s for s in finished if s.get("finished") and s.get("machine_class")),
                 key=lambda s: s["finished"])
    assert machine_class((RESULTS / "README.md").read_text()) == newest["machine_class"]


def test_forest_figure_draws_its_table():
    table = pd.DataFrame({"label": ["a", "b", "c"], "mean": [-1.0, 0.2, 0.0],
                          "lo": [-1.5, -0.3, -0.1], "hi": [-0.5, 0.7, 0.1],
                          "verdict": ["reproduced", "not resolved", "equivalent"],
                          "paper_gap": [-1.5, math.nan, 0.0]})
    ax = paper_figures.forest_figure(table).axes[0]
    bars = [ln for ln in ax.lines if len(ln.get_xdata()) == 2 and ln.get_linestyle() == "-"
            and ln.get_xdata()[0] != ln.get_xdata()[1]]
    dots = [ln for ln in ax.lines if ln.get_marker() == "o"]
    diamonds = [ln for ln in ax.lines if ln.get_marker() == "D"]
    assert [list(b.get_xdata()) for b in bars] == table[["lo", "hi"]].to_numpy().tolist()
    assert [b.get_ydata()[0] for b in bars] == [2, 1, 0]           # first claim on top
    assert [d.get_xdata()[0] for d in dots] == table["mean"].tolist()
    assert [d.get_xdata()[0] for d in diamonds] == [-1.5, 0.0]
    assert [b.get_color() for b in bars] == \
        [paper_figures.VERDICT_COLOURS[w] for w in table.verdict]
    assert {t.get_position()[1]: t.get_text() for t in ax.get_yticklabels()} == \
        {2: "a", 1: "b", 0: "c"}
    legend = [t.get_text() for t in ax.get_legend().get_texts()]    # the verdicts drawn only
    assert legend == ["reproduced", "equivalent", "not resolved", "the paper's gap"]
    assert "(b - a) / a x 100" in ax.get_xlabel()
    assert "positive = the second-named arm worse" in ax.get_xlabel()


def test_the_forest_draws_the_carried_gap_below_its_claim():
    table = pd.DataFrame({"label": ["a", "b"], "mean": [1.0, 0.2], "lo": [0.5, -0.3],
                          "hi": [1.5, 0.7], "verdict": ["reproduced", "not resolved"],
                          "paper_gap": [1.5, 0.4], "carried_lo": [0.2, math.nan],
                          "carried_hi": [3.0, math.nan]})
    ax = paper_figures.forest_figure(table).axes[0]
    dotted = [ln for ln in ax.lines if ln.get_linestyle() == ":"]
    assert [(list(d.get_xdata()), list(d.get_ydata())) for d in dotted] == \
        [([0.2, 3.0], [0.7, 0.7])]                       # claim a, at y 1, only
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[-1] == "the paper's gap carried to the lab"


def test_every_claim_table_names_the_claim_gap_and_its_sign():
    """Every table of the committed index with a claim and a gap column (v1, beyond, v2's two
    metrics, the same claim in several sweeps, what fresh seeds would buy) and the forest's
    caption name (b - a) / a and its sign; (a - b) / a appears once, where the page says the
    pages before 2026-12-07 used it."""
    lines = (RESULTS / "README.md").read_text().splitlines()
    heads = [head for head, rule in zip(lines, lines[1:]) if rule.startswith("|---")
             and "claim" in [c.strip() for c in head.strip("|").split("|")] and "gap" in head]
    assert len(heads) == 6
    for head in heads + [FOREST_CAPTION]:
        assert "(b - a) / a" in head and "positive = the second-named arm worse" in head, head
    old = [li for li in lines if "(a - b)" in li]
    assert len(old) == 1 and "Pages published before 2026-12-07 wrote the claim gap " \
        "(a - b) / a x 100, the opposite sign" in old[0]


def test_a_claim_whose_a_is_the_baseline_reads_the_gap_to_the_baseline():
    """formats' `bf16 < nvfp4` in the index is NVFP4's gap to BF16 in formats' own report,
    mean and interval: one sign on both pages."""
    cells = rows((RESULTS / "README.md").read_text())[("Findings", "formats", "bf16 < nvfp4")]
    report = (RESULTS / "formats" / "report.md").read_text().split("| recipe | seeds |")[1]
    nvfp4 = next(li for li in report.splitlines() if li.startswith("| `nvfp4` |"))
    gap, interval = [c.strip() for c in nvfp4.strip("|").split("|")][5:7]
    assert cells[4] == f"{gap} {interval}, 3 seeds"


def test_the_forest_draws_every_claim_once_whatever_its_kind_and_verdict():
    """A contradicted size claim and a claim of the lab's own are drawn, marked by kind; a
    claim repeating another's computation, or superseded, is not drawn twice; the page's
    caption says exactly that."""
    def claim(text: str, kind: str, verdict: str, gaps, **kw) -> ClaimResult:
        a, op, b = text.split()
        return ClaimResult("formats", Claim(a, b, op == "~", kind), verdict, tuple(gaps),
                           verdicts.gap_test(np.array(gaps)), **kw)
    results = [claim("bf16 < nvfp4", "paper", "reproduced", [-1.0, -1.2, -1.1]),
               claim("nvfp4_1x < mxfp4_1.25x", "size", "contradicted", [1.2, 1.3, 1.4]),
               claim("bf16 < fp8", "ours", "not resolved", [-0.1, 0.2, 0.0]),
               claim("bf16 < mxfp4", "paper", "reproduced", [-2.0, -2.1, -2.2],
                     duplicate_of="formats: bf16 < mxfp4"),
               claim("nvfp4 < mxfp4", "paper", "reproduced", [-0.5, -0.6, -0.7],
                     superseded_by="formats_v2")]
    table = forest_table({Table("v1"): results})
    assert list(table["label"]) == ["v1 formats: bf16 < nvfp4",
                                    "v1 formats: nvfp4_1x < mxfp4_1.25x (size)",
                                    "v1 formats: bf16 < fp8 (ours)"]
    assert list(table["verdict"]) == ["reproduced", "contradicted", "not resolved"]
    assert table.loc[1, "mean"] == pytest.approx(1.3)
    assert "the paper's, its size claims (marked size) and the lab's own" in FOREST_CAPTION


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
    check_page(results, readme)
    assert "1 of 1 published; claims: " in readme
    table = rows(readme)
    assert table[("Beyond", "recipes", "quartet_ii < nvfp4")][5] == "**not run**"
    assert f"2 of {len(ABLATIONS)} ablations published" in readme
    # the paper's table and tally are the ablations' alone (Holm's family grew)
    assert _headline(readme) == ("5", "2 reproduced, 1 equivalent, 1 not resolved, "
                                 "1 contradicted")


def test_index_of_a_missing_directory_is_one_line(tmp_path, capsys):
    assert main(["plot", "--index", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope" in err


def test_a_design_v2_sweep_is_published_beside_v1(results, tmp_path):
    """publish --as v2/<folder>: its claims in a table of their own, under both metrics (the
    paper's averaged train loss re-derived from the runs' metrics.csv), checked like v1."""
    sweep = make_sweep(tmp_path)
    for metrics in sweep.glob("*/seed=*/metrics.csv"):      # train losses that differ by run
        m = pd.read_csv(metrics)
        s = json.loads((metrics.parent / "summary.json").read_text())
        m["train_loss"] *= s["final_val_loss"] / 2
        m.to_csv(metrics, index=False)
    assert main(["publish", str(sweep), "--to", str(results), "--as", "v2/formats_nano"]) == 0
    readme = write_index(results).read_text()
    v2 = readme.split("## Design v2")[1].split("## Comparison classes")[0]
    primary, secondary = v2.split("### train loss averaged over the last 10% of steps")
    assert "### final validation loss (primary)" in primary
    check_page(results, readme)
    tail = oracle(results / "v2" / "formats_nano")
    folder = results / "v2" / "formats_nano"
    loss = {}
    for metrics in folder.glob("*/seed=*/metrics.csv"):
        m = pd.read_csv(metrics)
        s = json.loads((metrics.parent / "summary.json").read_text())
        loss[(s["quant"], s["seed"])] = m.loc[m["step"] > 0.9 * s["max_steps"], "train_loss"].mean()
    gaps = [(loss[("nvfp4", k)] - loss[("bf16", k)]) / loss[("bf16", k)] * 100 for k in (0, 1, 2)]
    row = next(li for li in secondary.splitlines() if "`bf16 < nvfp4`" in li)
    assert f"{np.mean(gaps):+.2f} [" in row
    assert tail and "Design v2 formats_nano:" in _summary(readme)
    where = next(li for li in readme.splitlines() if li.startswith("| `bf16 < nvfp4` | v1 "))
    assert "; v2 formats_nano (" in where and "formats_nano formats_nano" not in where


def test_the_current_answers_take_v2s_verdict_where_v2_tested_the_claim_again(results,
                                                                             tmp_path):
    """The headline's current answers: v1's paper claims, each replaced by design v2's
    verdict where a v2 sweep of the same ablation and model tested it (both nano here)."""
    sweep = make_sweep(tmp_path)
    for summary in sweep.glob("*/seed=*/summary.json"):      # v2 gives other verdicts
        s = json.loads(summary.read_text())
        s["final_val_loss"] -= 0.08 * (s["quant"] == "nvfp4") * (1 + 0.1 * s["seed"])
        summary.write_text(json.dumps(s))
    assert main(["publish", str(sweep), "--to", str(results), "--as", "v2/formats_nano"]) == 0
    readme = write_index(results).read_text()
    v2 = {r["claim"]: r["verdict"] for r in oracle(results / "v2" / "formats_nano")}
    words = ["contradicted"]            # rht_signs' per_call ~ fixed: its arm diverged
    for name in ("formats", "rht_signs"):
        kinds = {str(c): c.kind for c in load_paper(name).claims}
        for r in oracle(results / name):
            if kinds[r["claim"]] == "paper" and r.get("verdict", "not testable") != "not testable":
                words.append(v2.get(r["claim"], r["verdict"]) if name == "formats"
                             else r["verdict"])
    assert any(v2[c] != r["verdict"] for r in oracle(results / "formats") for c in v2
               if c == r["claim"] and "verdict" in r)          # the replacement shows
    expected = ", ".join(f"{words.count(w)} {w}" for w in dict.fromkeys(
        ["reproduced", "equivalent", "not resolved", "contradicted", "too few seeds"])
        if w in words)
    assert _headline(readme)[1] == expected


def test_a_smaller_v2_sweep_of_the_same_claims_is_superseded_not_counted(results, tmp_path):
    """Two v2 sweeps of one ablation on one model are never pooled: the one with fewer seeds
    (here 2, published in the folder listed last, with other verdicts) is labelled and left
    out of every count; the current answers are those of the 3-seed sweep alone."""
    def current(readme: str) -> tuple[str, str]:
        return _headline(readme)

    def worse_nvfp4(sweep: Path, by: float, per_seed: float) -> Path:
        for f in sweep.glob("*/seed=*/summary.json"):     # not v1's runs: other verdicts
            s = json.loads(f.read_text())
            s["final_val_loss"] += (by + per_seed * s["seed"]) * (s["quant"] == "nvfp4")
            f.write_text(json.dumps(s))
        return sweep

    big = worse_nvfp4(make_sweep(tmp_path), 0.05, 0.05)
    assert main(["publish", str(big), "--to", str(results), "--as", "v2/formats_nano"]) == 0
    alone = write_index(results).read_text()
    small = worse_nvfp4(make_sweep(tmp_path / "small"), 0.3, 0.0)
    for run in small.glob("*/seed=2"):
        shutil.rmtree(run)
    summary = pd.read_csv(small / "sweep_summary.csv")
    summary[summary["seed"] != 2].to_csv(small / "sweep_summary.csv", index=False)
    assert main(["publish", str(small), "--to", str(results), "--as", "v2/formats_nano_z"]) == 0
    readme = write_index(results).read_text()
    head = _summary(readme)
    assert "Design v2 formats_nano_z: superseded by formats_nano (3 seeds), not counted." in head
    assert head.split("Design v2 formats_nano:")[1].split(".")[0] == \
        _summary(alone).split("Design v2 formats_nano:")[1].split(".")[0]
    assert current(readme) == current(alone)
    table = rows(readme)
    z = [cells for (section, sweep, _), cells in table.items() if sweep == "formats_nano_z"]
    assert z and all("superseded by formats_nano (3 seeds)" in c[6]
                     for c in z if "not testable" not in c[5])
    assert any("not testable" not in c[5] for c in z)
    assert not any("superseded" in c[6] for (_, sweep, _), c in table.items()
                   if sweep != "formats_nano_z")


def drop_runs(sweep: Path, keep) -> Path:
    """``sweep`` with only the runs whose sweep_summary.csv row ``keep`` accepts."""
    summary = pd.read_csv(sweep / "sweep_summary.csv")
    kept = summary.apply(keep, axis=1)
    for job in summary.loc[~kept, "job"]:
        shutil.rmtree(sweep / job)
    summary[kept].to_csv(sweep / "sweep_summary.csv", index=False)
    return sweep


def test_a_fresh_v2_sweep_answers_only_the_claims_it_tested_on_more_seeds(results, tmp_path):
    """Amendment 11: a fresh sweep of two arms on 3 seeds beside a whole 2-seed sweep of one
    ablation and model answers the one claim of those arms; the whole sweep keeps the claims
    the fresh one never tested (the whole-sweep rule dropped them)."""
    whole = drop_runs(make_sweep(tmp_path / "whole"), lambda r: r["seed"] != 2)
    fresh = drop_runs(make_sweep(tmp_path / "fresh"), lambda r: r["quant"] in ("bf16", "nvfp4"))
    for f in fresh.glob("*quant=nvfp4/seed=*/summary.json"):    # other runs than v1's
        s = json.loads(f.read_text())
        f.write_text(json.dumps({**s, "final_val_loss": s["final_val_loss"] + 0.01 * s["seed"]}))
    for sweep, folder in ((whole, "v2/formats_nano"), (fresh, "v2/formats_nano_f")):
        assert main(["publish", str(sweep), "--to", str(results), "--as", folder]) == 0
    table = rows(write_index(results).read_text())
    notes = {(sweep, claim): c[6] for (section, sweep, claim), c in table.items()
             if section == "Design" and sweep in ("formats_nano", "formats_nano_f")
             and "not testable" not in c[5]}
    assert "superseded by formats_nano_f (3 seeds)" in notes[("formats_nano", "bf16 < nvfp4")]
    assert not any("superseded" in n for (sweep, claim), n in notes.items()
                   if (sweep, claim) != ("formats_nano", "bf16 < nvfp4"))
    data = pd.read_csv(results / "claims.csv")
    v2 = data[data["sweep"].isin(["formats_nano", "formats_nano_f"])
              & (data["metric"] == "final_val_loss")]
    counted = v2[v2["superseded_by"].isna() & v2["mean"].notna()]
    assert sorted(zip(counted["sweep"], counted["claim"])) == sorted(
        [("formats_nano", "nvfp4 < mxfp4"), ("formats_nano", "fp8 < nvfp4"),
         ("formats_nano", "bf16 < fp8"), ("formats_nano_f", "bf16 < nvfp4")])
    assert counted.set_index("claim").loc["bf16 < nvfp4", "n"] == 3


def machine_class(readme: str) -> str:
    """The machine class the committed index sized fresh seeds for, as its page names it."""
    return re.search(r"two arms on this machine class \(([^)]+)\)", readme)[1]


def shipped_seconds(cls: str, fmt: str, steps: int) -> float | None:
    """One nano run at 2048 tokens a step, one thread, from quant/step_times.csv's rows of
    ``cls``: the sooner backend; None where the class ships none for ``fmt``."""
    path = Path(__file__).parents[4] / "src" / "nvfp4_lab" / "quant" / "step_times.csv"
    with open(path, newline="") as f:
        found = [float(r["startup_s"] or 0) + steps * float(r["ms_per_step"]) / 1000
                 for r in csv.DictReader(f) if r["machine_class"] == cls and r["format"] == fmt
                 and r["model"] == "nano" and r["tokens_per_step"] == "2048"]
    return min(found, default=None)


def test_fresh_seeds_are_sized_at_the_carried_gap_or_the_margin_and_costed_here():
    """The committed index's purchase table, row by row: the smallest n whose noncentral-t
    power reaches 80% at the paper's gap carried to the lab where it is carried (claims.csv),
    else at the 0.5% margin (amendment 10; a null: TOST at the margin), from the claim's own
    spread of its committed runs, never the gap it observed; all n fresh, costed from the step
    times shipped for the page's machine class."""
    carried = pd.read_csv(RESULTS / "claims.csv").set_index(["sweep", "claim", "metric"])
    readme = (RESULTS / "README.md").read_text()
    cls = machine_class(readme)
    section = readme.split("## What fresh seeds would buy")[1].split("\n## ")[0]
    bought = [[c.strip() for c in li.strip("|").split("|")] for li in section.splitlines()
              if li.startswith("| ") and "`" in li]
    assert bought and f"{len(bought)} not resolved" in _headline(readme)[1]
    for sweep, claim, n, target, sd, need, hours in bought:
        claim = claim.strip("`")
        folder = RESULTS / ("v2" if (RESULTS / "v2" / sweep).is_dir() else "") / sweep
        r = next(o for o in oracle(folder) if o["claim"] == claim)
        g = r["gaps"]
        assert (int(n), sd) == (len(g), f"{g.std(ddof=1):.2f}"), (sweep, claim)
        assert r["verdict"] == "not resolved", (sweep, claim)
        gap = carried.loc[(sweep, claim, "final_val_loss"), "carried_gap"]
        gap = MARGIN if pd.isna(gap) else float(gap)
        assert target == ("TOST ±0.5" if r["same"] else f"margin +{MARGIN}" if gap == MARGIN
                          else f"paper's, carried {gap:+.2f}")
        assert need == seeds(gap, g.std(ddof=1), r["same"]), (sweep, claim)
        if need.isdigit():
            paper = load_paper(yaml.safe_load((folder / "multirun.yaml").read_text())["name"])
            fmts = {}
            for cfg in folder.glob("*/seed=*/config.yaml"):
                c = yaml.safe_load(cfg.read_text())
                over = dict(o.split("=", 1) for o in cfg.parents[1].name.split("_", 1)[1]
                            .split(",") if not o.startswith("+"))
                label = over.get(paper.axis) or c.get("arm") or c["quant"]["name"]
                fmts[label] = (c["quant"]["format"], c["model"]["name"], c["train"]["max_steps"])
            arms = []
            for label in re.split(r" [<~] ", claim):
                fmt, model, steps = fmts[label]
                assert model == "nano"
                arms.append(shipped_seconds(cls, fmt, steps))
            assert hours == ("—" if None in arms else
                             f"{int(need) * sum(arms) / 3600:.1f}"), (sweep, claim)


def test_one_row_of_fresh_seeds_by_hand():
    """components' full < without_sr (amendment 11's fresh sweep), a component whose gap is
    not carried:
    at the margin d = 0.5 (amendment 10) and the claim's own sd s,
    power(n) = P(T' > t_{0.975, n-1}) + P(T' < -t_{0.975, n-1}), T' noncentral
    t(n - 1, |d| sqrt(n) / s); the row's n is the first reaching 80%."""
    readme = (RESULTS / "README.md").read_text()
    row = next(li for li in readme.split("## What fresh seeds would buy")[1].splitlines()
               if li.startswith("| a11_g3_components | `full < without_sr`"))
    need = int(row.split("|")[6])
    g = next(o for o in oracle(RESULTS / "v2" / "a11_g3_components")
             if o["claim"] == "full < without_sr")
    s, d = g["gaps"].std(ddof=1), MARGIN

    def power(n: int) -> float:
        c, nc = stats.t.ppf(0.975, n - 1), abs(d) * math.sqrt(n) / s
        return stats.nct.sf(c, n - 1, nc) + stats.nct.cdf(-c, n - 1, nc)
    assert power(need) >= 0.8 > power(need - 1)


def test_the_committed_headline_counts_each_finding_once():
    """Every testable paper claim of the committed v1 and v2 tables is either counted or says
    where it is counted (or repeats another's runs, or is superseded); the counted ones name
    distinct findings of the paper files, and the headline counts exactly them."""
    readme = (RESULTS / "README.md").read_text()
    found = readme.split("## What the lab found")[1].split("\n## ")[0]
    by_verdict, by_size = found.split("On the paper's size")    # each answer in both lists
    listed = re.findall(r"`(\w+): ([^`]+)`", by_verdict)
    assert len(listed) == int(_headline(readme)[0])
    assert set(re.findall(r"`(\w+): ([^`]+)`", by_size)) <= set(listed)
    findings = []
    for sweep, claim in listed:
        folder = RESULTS / ("v2" if (RESULTS / "v2" / sweep).is_dir() else "") / sweep
        raw = yaml.safe_load((RESULTS.parent / "src/nvfp4_lab/paper" / (yaml.safe_load(
            (folder / "multirun.yaml").read_text())["name"] + ".yaml")).read_text())
        findings.append((raw.get("counted_in") or {}).get(
            claim, f"{yaml.safe_load((folder / 'multirun.yaml').read_text())['name']}: {claim}"))
    assert len(set(findings)) == len(findings)
    assert "formats: bf16 < nvfp4" in findings and "formats: nvfp4 < mxfp4" in findings
    for (section, sweep, claim), cells in rows(readme).items():
        testable = cells[5] not in ("**not testable**", "**not run**", "**pending**")
        if section in ("Findings", "Design") and testable and "size claim" not in cells[6] \
                and "ours" not in cells[6]:
            elsewhere = re.search(r"counted in|same runs as|superseded by", cells[6])
            assert bool(elsewhere) != ((sweep, claim) in listed), (sweep, claim, cells[6])


def test_the_first_screen_lists_each_current_answer_under_its_verdict(results):
    """The fixture's five paper claims (2 reproduced, 1 equivalent, 1 not resolved, 1
    contradicted, as the counts above say), each once, under the verdict claims.csv gives it,
    before anything else on the page."""
    readme = write_index(results).read_text()
    found = readme.split("## What the lab found")[1].split("\n## ")[0]
    assert readme.index("## What the lab found") < readme.index("![forest]")
    listed = {m[1]: (int(m[2]), re.findall(r"`([^`]+)`", m[3]))
              for m in re.finditer(r"^- \*\*(.+?)\*\* \((\d+)\): (.+)$", found, re.M)}
    assert {w: n for w, (n, _) in listed.items()} == {
        "reproduced": 2, "equivalent": 1, "not resolved": 1, "contradicted": 1}
    csv = pd.read_csv(results / "claims.csv")
    paper = csv[(csv["kind"] == "paper") & csv["superseded_by"].isna()]
    expected = {w: sorted(f"{r.sweep}: {r.claim}" for r in rows.itertuples())
                for w, rows in paper.groupby("verdict") if w in listed}
    expected["contradicted"] = ["rht_signs: per_call ~ fixed"]  # diverged: no row, no interval
    assert {w: sorted(names) for w, (_, names) in listed.items()} == expected
    assert len(found.splitlines()) < 40                     # one screen


def _headline(readme: str) -> tuple[str, str]:
    """The headline count: (how many findings, their verdicts counted)."""
    m = re.search(r"each counted once, in the sweep that owns it \((\d+) testable\): ([^(]+) \(",
                  readme)
    return m[1], m[2]


def _summary(readme: str) -> str:
    """The paragraph that counts the verdicts each way."""
    return next(p for p in readme.split("\n\n") if p.startswith("Generated by"))


def test_a_finding_tested_by_two_sweeps_counts_once_and_the_same_runs_read_alike(results,
                                                                                  tmp_path):
    """The fixture's formats runs published again as token_efficiency, whose paper file (here
    formats' numbers, MXFP4 at -5%, so that its own gap would give another verdict) names
    formats in ``counted_in``: its ``nvfp4 < mxfp4`` holds formats' runs and takes formats'
    verdict, flagged; its ``bf16 < nvfp4``, on other BF16 runs, is counted in formats; the
    headline counts each finding once, as without the copy."""
    alone = write_index(results).read_text()
    papers = tmp_path / "paper"
    shutil.copytree(RESULTS.parent / "src" / "nvfp4_lab" / "paper", papers)
    raw = yaml.safe_load((papers / "formats.yaml").read_text())
    raw["values"]["mxfp4"] = -5.0
    raw["counted_in"] = {c: f"formats: {c}" for c in raw["claims"]}
    (papers / "token_efficiency.yaml").write_text(yaml.safe_dump(raw))
    copy = results / "token_efficiency"
    shutil.copytree(results / "formats", copy)
    meta = yaml.safe_load((copy / "multirun.yaml").read_text())
    (copy / "multirun.yaml").write_text(yaml.safe_dump({**meta, "name": "token_efficiency"}))
    for f in copy.glob("*quant=bf16*/seed=*/summary.json"):        # other BF16 runs
        s = json.loads(f.read_text())
        s["final_val_loss"] *= 1.001
        f.write_text(json.dumps(s))
    readme = write_index(results, papers).read_text()
    table = rows(readme)
    own, copied = table[("Findings", "formats", "nvfp4 < mxfp4")], \
        table[("Findings", "token_efficiency", "nvfp4 < mxfp4")]
    assert copied[4] == own[4]                                      # the same runs, one interval
    assert copied[5] == own[5] == "**not resolved**"                # its own gap would rule out
    assert "same runs as formats: nvfp4 < mxfp4" in copied[6]
    assert "counted in v1 formats" in table[("Findings", "token_efficiency", "bf16 < nvfp4")][6]
    assert table[("Findings", "token_efficiency", "bf16 < nvfp4")][4] != \
        table[("Findings", "formats", "bf16 < nvfp4")][4]
    assert _headline(readme) == _headline(alone)
    found = readme.split("## What the lab found")[1].split("\n## ")[0]
    assert "token_efficiency:" not in found


def test_one_pass_of_plot_index_draws_the_reports_from_the_claims_it_writes(results, tmp_path,
                                                                             monkeypatch):
    """A report's context lines read the claims shipped with the package, which the index
    refreshes from the checkout's own results/: one ``plot --index`` must write them before it
    draws the reports, or the reports quote the claims of the pass before."""
    from nvfp4_lab.analysis.findings import context
    from nvfp4_lab.configs import paper_dir

    checkout = tmp_path / "checkout"
    package = checkout / "src" / "nvfp4_lab" / "paper"
    shutil.copytree(paper_dir(), package)
    (package / context.SHIPPED).write_text(",".join(context.CLAIM_COLUMNS) + "\n")   # stale
    shutil.move(results, checkout / "results")
    monkeypatch.setattr(context, "paper_dir", lambda: package)
    assert main(["plot", "--index", str(checkout / "results")]) == 0
    written = pd.read_csv(checkout / "results" / "claims.csv")
    row = written[(written["sweep"] == "formats") & written["sd"].notna()
                  & (written["metric"] == "final_val_loss")].iloc[0]
    report = (checkout / "results" / "formats" / "report.md").read_text()
    assert f"{row['mean']:+.2f} [{row['lo']:+.2f}, {row['hi']:+.2f}]" in report


def test_what_a_claim_says_on_the_papers_size_before_the_law_is_read(results):
    """No scaling grid or steps-or-size study in the folder: the format claims with a paper
    gap say they are not carried yet; a claim without a paper gap, or a null, says nothing;
    no verdict reads the retired *rules out the paper's size*."""
    readme = write_index(results).read_text()
    data = pd.read_csv(results / "claims.csv")
    formats = data[(data["sweep"] == "formats") & (data["metric"] == "final_val_loss")]
    said = dict(zip(formats["claim"], formats["size"]))
    assert said["bf16 < nvfp4"] == said["nvfp4 < mxfp4"] == carry.NO_LAW
    assert pd.isna(said["fp8 < nvfp4"])
    assert data.loc[data["sweep"] == "rht_signs", "size"].isna().all()
    assert "rules out the paper's size" not in set(data["verdict"])
    cells = rows(readme)[("Findings", "formats", "bf16 < nvfp4")]
    assert cells[6].startswith(f"on the paper's size: *{carry.NO_LAW}*")


def test_a_format_claim_is_read_against_the_papers_gap_carried_to_its_sweeps_regime(results):
    """With laws given, the fixture's formats claims are carried to the regime its runs
    recorded (tokens and steps read here from their summary.json files), and the word sets the
    claim's interval against the carried one."""
    laws = carry.Laws({"nvfp4": law("A", (-1.0, 0.3, -0.1), [(-1.0, 0.2, -0.2), (-1.1, 0.4, 0.0)]),
                       "mxfp4": law("A", (-1.0, 0.2, 0.1), [(-1.0, 0.1, 0.1), (-0.9, 0.3, 0.2)])},
                      steps_law.LawReading("A", "chosen"))
    sweep = load_sweep(results / "formats")
    tables = {Table("v1"): [sweep]}
    tested = claims.carried(tables, claims.evaluate(tables), laws)[Table("v1")]
    summaries = [json.loads(p.read_text()) for p in (results / "formats").glob("*/*/summary.json")]
    by = {r.claim: r for r in tested}
    for claim in (Claim("bf16", "nvfp4"), Claim("nvfp4", "mxfp4")):
        r = by[claim]
        mine = [s for s in summaries if s["quant"] in (claim.better, claim.worse)]
        assert r.carried.regime == carry.Regime(
            float(sweep.runs["params"].iloc[0]),       # the run config's, one model
            float(np.median([s["tokens"] for s in mine])),
            float(np.median([s["tokens"] / s["steps"] for s in mine])))
        c = r.carried
        want = (carry.SMALLER if r.test.hi < c.lo else carry.LARGER if r.test.lo > c.hi
                else carry.AS_CARRIED)
        assert r.size == want
    assert by[Claim("fp8", "nvfp4")].size == "" and by[Claim("fp8", "nvfp4")].carried is None
    no_size = sweep.runs.assign(params=None)           # a hybrid's runs: no transformer N
    tables = {Table("v1"): [dataclasses.replace(sweep, runs=no_size)]}
    r = next(r for r in claims.carried(tables, claims.evaluate(tables), laws)[Table("v1")]
             if r.claim == Claim("bf16", "nvfp4"))
    assert (r.size, r.carried) == (carry.NOT_COMPARABLE, None)
    assert "its runs record no transformer size" in r.note


def test_every_row_of_claims_csv_says_its_gaps_sign(results):
    """The CSV travels without the page: each row names the claim gap and its sign, and a
    row's mean is that gap of its runs (the fixture's formats bf16 < nvfp4, by hand)."""
    write_index(results)
    data = pd.read_csv(results / "claims.csv")
    assert set(data["gap_convention"]) == {
        "mean, lo, hi, carried_*: claim gap (b - a) / a x 100, positive = the second-named "
        "arm worse (since 2026-12-07; before, (a - b) / a)"}
    row = data[(data["sweep"] == "formats") & (data["claim"] == "bf16 < nvfp4")].iloc[0]
    loss = labelled_losses(results / "formats", "quant").pivot_table(
        index="seed", columns="label", values="loss")
    assert row["mean"] == pytest.approx(((loss["nvfp4"] - loss["bf16"]) / loss["bf16"]
                                         * 100).mean(), rel=1e-12)


def test_the_first_screen_counts_the_current_answers_by_what_they_say_on_size(results):
    """Under the verdicts, the current answers listed again by their size word, each word with
    the rows of claims.csv that carry it (the fixture: formats' two format claims, not carried
    before the law is read)."""
    readme = write_index(results).read_text()
    found = readme.split("## What the lab found")[1].split("\n## ")[0].split(
        "On the paper's size")[1]
    listed = {m[1]: (int(m[2]), sorted(re.findall(r"`([^`]+)`", m[3])))
              for m in re.finditer(r"^- \*(.+?)\* \((\d+)\): (.+)$", found, re.M)}
    csv = pd.read_csv(results / "claims.csv")
    current = csv[csv["current"] & (csv["metric"] == "final_val_loss") & csv["size"].notna()]
    assert listed == {w: (len(rows), sorted(f"{r.sweep}: {r.claim}" for r in rows.itertuples()))
                      for w, rows in current.groupby("size")}
    assert listed[carry.NO_LAW][0] == 2
