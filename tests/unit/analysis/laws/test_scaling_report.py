"""A scaling study's report, from synthetic run directories whose every loss is known: the cells
it tabulates, the cells it leaves out, and the paper's numbers it sets beside the law."""
from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from nvfp4_lab.analysis import collect
from nvfp4_lab.analysis.laws.scaling_report import fit_md, in_words, index_md, is_study
from nvfp4_lab.analysis.reports.report import write_report
from nvfp4_lab.analysis.reports.sections import markdown

# name -> (d_model, non-embedding parameters by hand: 5 (9 D^2 + 2 D) + D)
SIZES = {"w32": (32, 46_432), "w64": (64, 185_024)}
STEPS = {("w32", 2): 93, ("w32", 5): 232, ("w32", 10): 464, ("w64", 2): 370,
         ("w64", 5): 925, ("w64", 10): 1850,
         ("w64", 20): 3700}                     # the last cell: seed 2 of nvfp4 still running
BF16 = {0: 2.50, 1: 2.52, 2: 2.49}             # at D/N 2; lower the longer a run trains
REL = {0: 0.010, 1: 0.014, 2: 0.012}            # nvfp4's relative gap per seed, at w32, D/N 2


def _gap(size: str, tpp: int, seed: int) -> float:
    """Grows with D/N, shrinks with size; a seed-to-seed spread on top."""
    return REL[seed] * (tpp / 2) ** 0.3 * (1.0 if size == "w32" else 0.7)


def _bf16(tpp: int, seed: int) -> float:
    return BF16[seed] - 0.2 * math.log(tpp / 2)


GRID = {"train.tokens_per_param": "2,5,10,20", "model": "w32,w64", "seed": "0,1,2",
        "quant": "bf16,nvfp4"}                  # Hydra's order: the last key varies fastest


def _job(size: str, tpp: int, seed: int, quant: str) -> str:
    """The run's directory as Hydra names it: the job's number in GRID's order, its overrides."""
    num = ((2, 5, 10, 20).index(tpp) * 2 + ("w32", "w64").index(size)) * 6 + seed * 2 \
        + ("bf16", "nvfp4").index(quant)
    return f"{num}_model={size},quant={quant},train.tokens_per_param={tpp}/seed={seed}"


def _study(make, levels=(2, 5, 10, 20)):
    for (size, tpp), steps in STEPS.items():
        if tpp not in levels:
            continue
        d, _ = SIZES[size]
        for seed in (0, 1, 2):
            for quant in ("bf16", "nvfp4"):
                loss = _bf16(tpp, seed) * (1 + _gap(size, tpp, seed) * (quant == "nvfp4"))
                running = (size, tpp, seed, quant) == ("w64", 20, 2, "nvfp4")
                run = make(_job(size, tpp, seed, quant), quant=quant, seed=seed,
                               steps=[steps], val_loss=[loss], name="scaling",
                               status="running" if running else "done",
                               config={"model.name": size, "model.d_model": d,
                                       "model.n_heads": 2, "model.n_kv_heads": 1,
                                       "train.tokens_per_param": tpp})
                summary = json.loads((run / "summary.json").read_text())
                device = f"cpu ({'AVX2' if (size, tpp) == ('w32', 10) else 'AVX512'})"
                (run / "summary.json").write_text(json.dumps({**summary, "model": size,
                                                              "device": device}))
    sweep = run.parents[1]
    (sweep / "multirun.yaml").write_text(yaml.safe_dump(
        {"name": "scaling", "hydra": {"sweeper": {"params": GRID},
                                      "overrides": {"task": ["+ablation=scaling"]}}},
        sort_keys=False))
    return sweep


@pytest.fixture
def study(runs_factory):
    return _study(runs_factory)


def test_a_study_is_runs_over_sizes_and_budgets(study, runs_factory):
    assert is_study(collect([study]).runs)
    one = [runs_factory(f"a{q}{s}", quant=q, seed=s, val_loss=[3.0, 2.9, 2.8, 2.7])
           for s in (0, 1) for q in ("bf16", "nvfp4")]
    assert not is_study(collect(one).runs)


def test_one_budget_level_is_a_study_without_a_law_yet(runs_factory):
    first = _study(runs_factory, levels=(2,))
    assert is_study(collect([first]).runs)
    report = write_report([first]).read_text()
    cells = pd.read_csv(first / "tables" / "scaling_nvfp4_vs_bf16_cells.csv")
    assert list(cells["size"]) == ["w32", "w64"] and set(cells["seeds"]) == {3}
    assert "No law fitted yet: the 2 cells with a positive mean gap cannot identify" in report
    # one machine: the paragraph names it, the table does not repeat it per row (its CSV does)
    assert "On cpu (AVX512) (12 runs)." in report and "| machine |" not in report
    assert set(cells["machine"]) == {"cpu (AVX512)"}


def test_the_report_tabulates_the_complete_cells(study):
    report = write_report([study]).read_text()
    assert "## Scaling: the gap against tokens per parameter and model size" in report
    assert ("41 runs finished, 1 running; 7 of the grid's 48 runs not finished, by cell below "
            "(pending, never estimated). On cpu (AVX512) (35 runs); cpu (AVX2) (6 runs)") in report
    # w32 never ran at D/N 20, and w64's seed 2 of nvfp4 there is still running
    assert "| 20 | w32 | 6 |\n| 20 | w64 | 1 |" in report
    assert "| seeds | relative gap % | absolute gap (nats) | machine |" in report   # two machines
    assert "| w32 | 46432 | 2 | 3 | " in report and "| w32 | 46432 | 9.99 | 3 | " in report
    cells = pd.read_csv(study / "tables" / "scaling_nvfp4_vs_bf16_cells.csv")
    # the running seed leaves (w64, D/N 20) out; the other six cells, each mean by hand
    got = {(r["size"], round(r["D/N"])): r for r in cells.to_dict("records")}
    assert sorted(got) == [("w32", 2), ("w32", 5), ("w32", 10), ("w64", 2), ("w64", 5),
                           ("w64", 10)]
    per_step = 1000                                   # the synthetic runs' tokens per step
    for (size, tpp), row in got.items():
        assert row["N"] == SIZES[size][1] and row["seeds"] == 3
        assert row["machine"] == f"cpu ({'AVX2' if (size, tpp) == ('w32', 10) else 'AVX512'})"
        assert row["D"] == STEPS[size, tpp] * per_step
        assert row["D/N"] == pytest.approx(STEPS[size, tpp] * per_step / SIZES[size][1])
        mean = sum(_gap(size, tpp, s) for s in (0, 1, 2)) / 3
        assert row["relative"] == pytest.approx(mean, rel=1e-9)
        absolute = sum(_bf16(tpp, s) * _gap(size, tpp, s) for s in (0, 1, 2)) / 3
        assert row["absolute"] == pytest.approx(absolute, rel=1e-9)
        assert row["relative_lo"] < row["relative"] < row["relative_hi"]
        assert row["absolute_lo"] < row["absolute"] < row["absolute_hi"]
        # the report prints the same numbers, D/N to two decimals, the relative gap in %
        shown = {("w32", 10): "9.99", ("w64", 10): "10"}.get((size, tpp), str(tpp))
        assert f"| {size} | {SIZES[size][1]} | {shown} | 3 | {100 * mean:+.3f} [" in report


def test_each_seeds_pair_is_tabulated(study):
    report = write_report([study]).read_text()
    seeds = pd.read_csv(study / "tables" / "scaling_nvfp4_vs_bf16_seeds.csv")
    assert "[tables/scaling_nvfp4_vs_bf16_seeds.csv](tables/scaling_nvfp4_vs_bf16_seeds.csv)" \
        in report
    # the six complete cells' three seeds; the running seed's cell (w64, D/N 20) is left out
    assert len(seeds) == 18 and not ((seeds["size"] == "w64") & (seeds["D/N"] > 19)).any()
    for row in seeds.to_dict("records"):
        size, tpp, seed = row["size"], round(row["D/N"]), row["seed"]
        assert row["loss_bf16"] == pytest.approx(_bf16(tpp, seed), rel=1e-12)
        assert row["loss_nvfp4"] == pytest.approx(_bf16(tpp, seed) * (1 + _gap(size, tpp, seed)),
                                                  rel=1e-12)
        assert row["relative"] == pytest.approx(_gap(size, tpp, seed), rel=1e-9)
        assert row["absolute"] == pytest.approx(_bf16(tpp, seed) * _gap(size, tpp, seed),
                                                rel=1e-9)


def test_the_law_and_the_paper_beside_it(study):
    report = write_report([study]).read_text()
    fit = pd.read_csv(study / "tables" / "scaling_nvfp4_vs_bf16_fit.csv")
    assert list(fit["form"]) == ["relative", "absolute"] and set(fit["cells"]) == {6}
    # the synthetic relative gap is exactly 0.012 (D/N / 2)^0.3 0.7^[w64] on the mean seed:
    # the relative law comes back with a = 0.3, b = log 0.7 / log 4 and no residual; the
    # absolute one, times a BF16 loss that falls with D/N, bends away from a power
    rel = fit.set_index("form").loc["relative"]
    assert rel["a"] == pytest.approx(0.3, abs=2e-3)                     # D/N: whole steps
    assert rel["a_lo"] < rel["a"] < rel["a_hi"] and rel["b_lo"] < rel["b"] < rel["b_hi"]
    b = math.log(0.7) / math.log(SIZES["w64"][1] / SIZES["w32"][1])
    assert rel["b"] == pytest.approx(b, abs=2e-3)
    assert f"| relative | {rel['k']:.3g} | {rel['a']:+.3f} [{rel['a_lo']:+.3f}, " in report
    assert "the relative law leaves a residual RMS" in report
    # the paper's 1.2B row: the relative law at D/N 833, the paper's 2.1% beside it
    row = next(line for line in report.splitlines() if line.startswith("| 1.2B |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    law = 0.012 * (1e12 / 1.2e9 / 2) ** 0.3 * (1.2e9 / SIZES["w32"][1]) ** b
    assert cells[:4] == ["1.2B", "1.2e+09", "1e+12", "833"]
    assert float(cells[4].split("%")[0]) == pytest.approx(100 * law, rel=0.02)
    assert cells[5] == "+2.1%"
    # fitted: N from w32 to w64, D/N from w64's 370 steps (1.9997) to its 1850 (9.9987)
    tpp = (370_000 / SIZES["w64"][1], 1_850_000 / SIZES["w64"][1])
    assert cells[7:] == [f"{math.log10(1.2e9 / SIZES['w64'][1]):.1f}, "
                         f"{math.log10(1e12 / 1.2e9 / tpp[1]):.1f}", "far extrapolation"]
    assert (f"The fitted cells span {math.log10(SIZES['w64'][1] / SIZES['w32'][1]):.1f} decades"
            f" in N and {math.log10(tpp[1] / tpp[0]):.1f} in D/N; a far extrapolation") in report
    # 8B: the paper's 1.5% beside the law; 12B: no BF16 run in the paper, nothing beside it
    paper = {line.split("|")[1].strip(): line.split("|")[6].strip()
             for line in report.splitlines() if line.startswith(("| 8B |", "| 12B |"))}
    assert paper == {"8B": "+1.5%", "12B": "—"}
    assert "(1.2B: validation loss at 1T, Fig. 8" in report
    for form in ("relative", "absolute", "residuals"):
        assert (study / "figures" / f"scaling_nvfp4_vs_bf16_{form}.png").stat().st_size > 0


def test_the_corner_is_predicted_before_its_seeds_are_in(study):
    report = write_report([study]).read_text()
    assert "Held out: `w64` at D/N 20, the grid's largest model at its longest training" in report
    held = pd.read_csv(study / "tables" / "scaling_nvfp4_vs_bf16_holdout.csv")
    assert list(held["form"]) == ["relative", "absolute"] and set(held["cells"]) == {6}
    assert set(held["seeds"]) == {0} and set(held["reading"]) == {"not finished"}
    rel = held.set_index("form").loc["relative"]
    # the six cells lie on 0.012 (D/N / 2)^0.3 0.7^[w64] (the mean seed's gap): at w64, D/N 20
    assert rel["predicted"] == pytest.approx(0.012 * 10 ** 0.3 * 0.7, rel=5e-3)
    assert rel["predicted_lo"] < rel["predicted"] < rel["predicted_hi"]
    assert (f"| relative | 6 | {100 * rel['predicted']:+.3g}% [{100 * rel['predicted_lo']:+.3g}, "
            f"{100 * rel['predicted_hi']:+.3g}] | — | not finished |") in report


def test_the_corners_seeds_are_read_against_the_prediction(study):
    before = pd.read_csv(_holdout_table(study))
    summary = study / _job("w64", 20, 2, "nvfp4") / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "status": "done"}))
    after = pd.read_csv(_holdout_table(study)).set_index("form")
    fit = pd.read_csv(study / "tables" / "scaling_nvfp4_vs_bf16_fit.csv")
    assert set(fit["cells"]) == {7} and set(after["cells"]) == {6}   # the law has it; the check not
    assert list(after["predicted"]) == list(before["predicted"])
    observed = sum(_gap("w64", 20, s) for s in (0, 1, 2)) / 3
    assert after.loc["relative", "seeds"] == 3
    assert after.loc["relative", "observed"] == pytest.approx(observed, rel=1e-9)
    assert after.loc["relative", "reading"] == "inside"


def _holdout_table(study: Path) -> Path:
    write_report([study])
    return study / "tables" / "scaling_nvfp4_vs_bf16_holdout.csv"


def test_no_corner_is_named_while_a_size_of_the_grid_has_no_run(study):
    multirun = yaml.safe_load((study / "multirun.yaml").read_text())
    multirun["hydra"]["sweeper"]["params"]["model"] = "w32,w64,w96"
    (study / "multirun.yaml").write_text(yaml.safe_dump(multirun, sort_keys=False))
    report = write_report([study]).read_text()
    assert "Held out" not in report and "| w96 |" in report             # listed as pending
    assert not (study / "tables" / "scaling_nvfp4_vs_bf16_holdout.csv").exists()


def _sign(lo: float, hi: float) -> str:
    return "grows" if lo > 0 else "shrinks" if hi < 0 else "shows no resolved trend"


def test_the_exponents_are_read_in_words_from_their_intervals(study):
    report = write_report([study]).read_text()
    fit = pd.read_csv(study / "tables" / "scaling_nvfp4_vs_bf16_fit.csv").set_index("form")
    # the synthetic relative gap grows as (D/N)^0.3 and shrinks by 0.7 from w32 to w64
    rel = fit.loc["relative"]
    assert (_sign(rel["a_lo"], rel["a_hi"]), _sign(rel["b_lo"], rel["b_hi"])) == ("grows",
                                                                                "shrinks")
    words = []
    for x in ("a", "b"):
        r, a = (_sign(fit.loc[form, f"{x}_lo"], fit.loc[form, f"{x}_hi"])
                for form in ("relative", "absolute"))
        words.append(f"{r} under both laws" if r == a else
                     f"{r} under the relative law and {a} under the absolute one")
    assert (f"In words: as training goes on (D/N) the gap {words[0]}; with model size (N) it "
            f"{words[1]}.") in report


@pytest.mark.parametrize("rel, ab, said", [
    ((0.1, 0.5), (0.2, 0.4), "grows under both laws"),
    ((-0.1, 0.5), (-0.2, 0.4), "shows no resolved trend under either law"),
    ((-0.5, -0.1), (-0.2, 0.4), "shrinks under the relative law and shows no resolved trend "
                                "under the absolute one")])
def test_a_direction_is_named_only_where_the_interval_excludes_zero(rel, ab, said):
    table = pd.DataFrame({"form": ["relative", "absolute"], "a_lo": [rel[0], ab[0]],
                          "a_hi": [rel[1], ab[1]], "b_lo": [0.1, 0.1], "b_hi": [0.2, 0.2]})
    assert in_words(table).startswith(f"In words: as training goes on (D/N) the gap {said}; "
                                      f"with model size (N) it grows under both laws.")


def test_a_bound_that_rounds_to_zero_keeps_its_side_of_zero():
    """b's interval [-0.585, -2.74e-05] excludes 0, as its words say: "-0.000" would hide it."""
    table = pd.DataFrame({"form": ["relative"], "k": [1.03], "a": [0.274], "a_lo": [0.0509],
                          "a_hi": [0.606], "b": [-0.362], "b_lo": [-0.585], "b_hi": [-2.74e-5],
                          "rms": [0.25], "cells": [18], "excluded": ["none"]})
    row = fit_md(table).iloc[0]
    assert (row["a (D/N)"], row["b (N)"]) == ("+0.274 [+0.051, +0.606]",
                                              "-0.362 [-0.585, -2.7e-05]")


def test_the_index_shows_each_law_as_the_report_does(study):
    """The results index's section renders the fit table and its words as the report does,
    from the table's CSV (a k of 3e-5 stays 3e-5, not a float rounded to 0.0000)."""
    report = write_report([study]).read_text()
    section = "\n\n".join(map(markdown, index_md(study, "scaling")))
    table = re.search(r"^\| form \| k \|.*?\n\n", report, re.S | re.M)[0].strip()
    words = re.search(r"^In words: .*$", report, re.M)[0]
    assert table.count("\n") == 3 and table in section and words in section


def test_the_index_and_the_report_say_when_the_grid_is_whole(runs_factory):
    first = _study(runs_factory, levels=(2,))                   # 12 runs of a 48-run grid
    section = "\n\n".join(map(markdown, index_md(first, "scaling")))
    assert "12 of the pre-registered grid's 48 runs published; the rest are pending" in section
    multirun = yaml.safe_load((first / "multirun.yaml").read_text())
    multirun["hydra"]["sweeper"]["params"]["train.tokens_per_param"] = "2"   # now 12 jobs
    (first / "multirun.yaml").write_text(yaml.safe_dump(multirun, sort_keys=False))
    section = "\n\n".join(map(markdown, index_md(first, "scaling")))
    assert "all 12 runs of the pre-registered grid published." in section
    assert "pending" not in section
    report = write_report([first]).read_text()                  # and the report
    assert "12 runs finished, 0 running; all of the grid's 12 runs finished. On" in report
    assert "pending" not in report


def test_the_published_study_regenerates_exactly(tmp_path):
    """results/scaling's tables come back byte for byte from its committed runs."""
    published = Path(__file__).parents[4] / "results" / "scaling"
    copy = tmp_path / "scaling"
    shutil.copytree(published, copy, ignore=shutil.ignore_patterns("tables", "figures", "*.md"))
    write_report([copy])
    tables = sorted(p.name for p in (published / "tables").glob("scaling_*.csv"))
    assert tables and tables == sorted(p.name for p in (copy / "tables").glob("scaling_*.csv"))
    for name in tables:
        assert (copy / "tables" / name).read_bytes() == (published / "tables" / name).read_bytes()
