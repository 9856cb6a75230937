"""The report's downstream section from hand-made ``eval.json`` files: accuracy per recipe,
paired error-rate gaps with their t intervals, and the chance sentence, all worked out here."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from helpers.sweeps import make_sweep
from scipy import stats

from nvfp4_lab.analysis import write_report

# task -> recipe -> (accuracy of seeds 0, 1, 2); chance 0.25 on both tasks
ACC = {"arc": {"bf16": (0.40, 0.42, 0.41), "nvfp4": (0.38, 0.41, 0.37)},
       "hella": {"bf16": (0.25, 0.26, 0.24), "nvfp4": (0.26, 0.25, 0.25)}}
STDERR = 0.01


def write_scores(sweep) -> None:
    """eval.json in the bf16 and nvfp4 runs (fp8 and mxfp4 have none), by hand."""
    for recipe in ("bf16", "nvfp4"):
        for run in sweep.glob(f"*_quant={recipe}/seed=*"):
            seed = int(run.name.split("=")[1])
            tasks = {task: {"acc": by[recipe][seed], "acc_stderr": STDERR, "n": 1000,
                            "step": 40, "lm_eval": "0.4.13", "chance": 0.25}
                     for task, by in ACC.items()}
            (run / "eval.json").write_text(json.dumps({"quantized": tasks}))


def t_interval(values: list[float]) -> tuple[float, float, float]:
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def test_downstream_table_has_accuracy_and_paired_gaps_by_hand(tmp_path):
    sweep = make_sweep(tmp_path)
    write_scores(sweep)
    report = write_report([sweep], tmp_path / "out", baseline="bf16", pdf=False)
    table = pd.read_csv(tmp_path / "out" / "tables" / "downstream.csv")
    assert sorted(table["label"].unique()) == ["bf16", "nvfp4"]   # no eval.json: left out
    for task, by in ACC.items():
        for recipe, accs in by.items():
            row = table[(table["task"] == task) & (table["label"] == recipe)].iloc[0]
            mean, lo, hi = t_interval(list(accs))
            assert (row["n"], row["acc"]) == (3, pytest.approx(mean))
            assert (row["acc_lo"], row["acc_hi"]) == (pytest.approx(lo), pytest.approx(hi))
        base = [1 - a for a in by["bf16"]]
        gaps = [(1 - a - b) / b * 100 for a, b in zip(by["nvfp4"], base)]
        mean, lo, hi = t_interval(gaps)
        row = table[(table["task"] == task) & (table["label"] == "nvfp4")].iloc[0]
        assert (row["gap_pct"], row["gap_lo"], row["gap_hi"]) == (
            pytest.approx(mean), pytest.approx(lo), pytest.approx(hi))
    text = report.read_text()
    assert "## Downstream tasks (lm-eval)" in text
    nvfp4_arc = t_interval([(a - b) / (1 - a) * 100 for a, b in
                            zip(ACC["arc"]["bf16"], ACC["arc"]["nvfp4"])])[0]
    assert f"| arc | `nvfp4` | 3 | {sum(ACC['arc']['nvfp4']) / 3:.4f} |" in text
    assert f"| {nvfp4_arc:+.2f} |" in text


def test_the_report_says_which_tasks_sit_at_chance(tmp_path):
    """hella's accuracies are within 1.96 standard errors of 0.25 for both recipes; arc's are
    well above it."""
    sweep = make_sweep(tmp_path)
    write_scores(sweep)
    text = write_report([sweep], tmp_path / "out", baseline="bf16", pdf=False).read_text()
    table = pd.read_csv(tmp_path / "out" / "tables" / "downstream.csv")
    above = {task: set(part.loc[part["above_chance"], "label"])
             for task, part in table.groupby("task")}
    assert above == {"arc": {"bf16", "nvfp4"}, "hella": set()}
    sentence = text[text.index("At chance:"):]
    assert "`hella`" in sentence and "`arc`" not in sentence.split("\n")[0]
    assert "too small for this task to mean anything" in sentence


def test_no_eval_json_no_downstream_section(tmp_path):
    sweep = make_sweep(tmp_path)
    text = write_report([sweep], tmp_path / "out", baseline="bf16", pdf=False).read_text()
    assert "Downstream" not in text
    assert not (tmp_path / "out" / "tables" / "downstream.csv").exists()
