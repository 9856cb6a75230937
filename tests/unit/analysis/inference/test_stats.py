"""Known answers for analysis.inference.stats: t intervals, paired gaps, verdicts, pooled gaps."""
import math

import numpy as np
import pandas as pd
import pytest

from nvfp4_lab.analysis.inference.stats import Interval, mean_ci, paired, paired_gaps, recipe_table


def t_df2(p):
    return (2 * p - 1) / math.sqrt(2 * p * (1 - p))


def test_mean_ci_uses_t_with_n_minus_1_df():
    # [1, 2, 3]: mean 2, sd sqrt((1 + 0 + 1) / 2) = 1, half-width t_{0.975,2} / sqrt(3)
    # with t_{0.975,2} = 0.95 / sqrt(2 * 0.975 * 0.025) = 4.30265...
    half = t_df2(0.975) / math.sqrt(3)
    ci = mean_ci([1.0, 2.0, 3.0])
    assert (ci.n, ci.mean, ci.sd) == (3, 2.0, 1.0)
    assert ci.lo == pytest.approx(2.0 - half, abs=1e-12)
    assert ci.hi == pytest.approx(2.0 + half, abs=1e-12)
    # level 0.90 -> quantile 0.95: t = 0.9 / sqrt(2 * 0.95 * 0.05) = 2.91998...
    ci90 = mean_ci([1.0, 2.0, 3.0], level=0.90)
    assert ci90.hi == pytest.approx(2.0 + t_df2(0.95) / math.sqrt(3), abs=1e-12)


def test_mean_ci_drops_nan_and_handles_small_n():
    assert mean_ci([1.0, np.nan, 2.0, 3.0]) == mean_ci([1.0, 2.0, 3.0])
    one = mean_ci([5.0, np.nan])
    assert (one.n, one.mean) == (1, 5.0)
    assert all(math.isnan(v) for v in (one.sd, one.lo, one.hi))
    none = mean_ci([np.nan])
    assert none.n == 0 and math.isnan(none.mean) and math.isnan(none.lo)
    assert isinstance(none, Interval)


def _runs(rows):
    """rows: (label, seed, final_val_loss[, status]) -> a runs table."""
    recs = []
    for i, row in enumerate(rows):
        label, seed, loss, status = (*row, "done") if len(row) == 3 else row
        recs.append({"run": f"r{i}", "label": label, "seed": seed, "status": status,
                     "final_val_loss": loss, "best_val_loss": loss, "final_train_loss": loss,
                     "tokens": 1000, "recipe": label})
    return pd.DataFrame(recs)


def test_paired_gaps_sign_convention_and_pairing():
    runs = _runs([
        ("bf16", 0, 1.00), ("bf16", 1, 2.00), ("bf16", 2, 3.00, "failed"),
        ("nvfp4", 0, 1.01),                      # (1.01 - 1.00) / 1.00 * 100 = +1 %: worse
        ("nvfp4", 1, 1.96), ("nvfp4", 1, 1.98),  # repeats averaged: 1.97 -> -1.5 %: better
        ("nvfp4", 2, 2.90),                      # baseline seed 2 failed: no pair
        ("nvfp4", 3, np.nan),                    # no finite metric: no pair
    ])
    gaps = paired_gaps(runs, "bf16", "final_val_loss")
    assert list(gaps.columns) == ["label", "seed", "value", "baseline_value", "gap_pct"]
    assert list(gaps["seed"]) == [0, 1]
    assert list(gaps["label"]) == ["nvfp4", "nvfp4"]
    assert gaps["gap_pct"].tolist() == pytest.approx([1.0, -1.5], abs=1e-9)
    assert gaps["value"].tolist() == pytest.approx([1.01, 1.97], abs=1e-12)
    assert gaps["baseline_value"].tolist() == [1.00, 2.00]


def _verdict_runs():
    # Baseline losses differ a lot between seeds (2.0, 2.5, 3.0), so only the per-seed
    # (paired) gaps can resolve a 1-2 % difference.
    base = {0: 2.0, 1: 2.5, 2: 3.0}

    def exp(label, gaps_pct):     # a gap g: g % more loss than the baseline's (positive = worse)
        return [(label, s, base[s] * (1 + g / 100)) for s, g in zip(base, gaps_pct)]

    return _runs([
        *exp("better", [-1.0, -2.0, -1.5]),
        *[("bf16", s, v) for s, v in base.items()],
        *exp("worse", [1.0, 2.0, 1.5]),
        *exp("unclear", [-1.0, 1.0, -0.5]),
        ("single", 0, 2.1), ("single", 1, 2.0, "diverged"),
        ("unpaired", 7, 2.0),
        ("crashed", 0, np.nan, "failed"),
    ])


def test_recipe_table_verdicts():
    table = recipe_table(_verdict_runs(), baseline="bf16").set_index("label")
    # first-appearance order, one row per label, failed-only label kept with n = 0
    assert list(table.index) == ["better", "bf16", "worse", "unclear", "single", "unpaired",
                                 "crashed"]
    assert table["verdict"].to_dict() == {
        "better": "better", "bf16": "baseline", "worse": "worse", "unclear": "not resolved",
        "single": "one seed: no interval", "unpaired": "no paired seeds",
        "crashed": "no paired seeds"}
    assert table["n_pairs"].to_dict() == {"better": 3, "bf16": 3, "worse": 3, "unclear": 3,
                                          "single": 1, "unpaired": 0, "crashed": 0}
    # "better": gaps -1, -2, -1.5 -> mean -1.5, sd 0.5, half = t_{0.975,2} * 0.5 / sqrt(3)
    half = t_df2(0.975) * 0.5 / math.sqrt(3)
    better = table.loc["better"]
    assert better["gap_pct"] == pytest.approx(-1.5, abs=1e-9)
    assert (better["gap_lo"], better["gap_hi"]) == pytest.approx((-1.5 - half, -1.5 + half))
    assert table.loc["worse", "gap_lo"] == pytest.approx(1.5 - half)
    # "unclear": gaps -1, 1, -0.5 -> mean -1/6, interval straddles 0
    assert table.loc["unclear", "gap_pct"] == pytest.approx(-1 / 6)
    assert table.loc["unclear", "gap_lo"] < 0 < table.loc["unclear", "gap_hi"]
    # "single": one pair, gap (2.1 - 2.0) / 2.0 * 100 = +5 % (worse), no interval
    assert table.loc["single", "gap_pct"] == pytest.approx(5.0)
    assert math.isnan(table.loc["single", "gap_lo"])
    assert math.isnan(table.loc["bf16", "gap_pct"])


def test_recipe_table_descriptive_columns():
    table = recipe_table(_verdict_runs()).set_index("label")
    assert list(table.columns) == ["n", "mean", "sd", "ci_lo", "ci_hi", "runs"]
    # bf16: 2.0, 2.5, 3.0 -> mean 2.5, sd 0.5, interval 2.5 +- t_{0.975,2} * 0.5 / sqrt(3)
    half = t_df2(0.975) * 0.5 / math.sqrt(3)
    bf16 = table.loc["bf16"]
    assert (bf16["n"], bf16["mean"], bf16["sd"]) == (3, 2.5, 0.5)
    assert (bf16["ci_lo"], bf16["ci_hi"]) == pytest.approx((2.5 - half, 2.5 + half))
    # "single": the diverged run is not counted
    assert (table.loc["single", "n"], table.loc["single", "mean"]) == (1, 2.1)
    assert table.loc["crashed", "n"] == 0 and math.isnan(table.loc["crashed", "mean"])


def test_a_repeated_seed_is_one_sample_not_two():
    """Two runs of nvfp4 seed 0 (a repeat, here bit-identical) and one of seed 1: n = 2 seeds,
    the seed-0 value counted once, never a zero-width interval from the duplicates."""
    runs = _runs([("nvfp4", 0, 2.0), ("nvfp4", 0, 2.0), ("nvfp4", 1, 2.2),
                  ("dup", 0, 2.1), ("dup", 0, 2.1)])
    table = recipe_table(runs).set_index("label")
    assert (table.loc["nvfp4", "n"], table.loc["nvfp4", "runs"]) == (2, 3)
    assert table.loc["nvfp4", "mean"] == pytest.approx(2.1)      # (2.0 + 2.2) / 2, not 6.2 / 3
    assert table.loc["nvfp4", "sd"] == pytest.approx(0.1 * math.sqrt(2))
    assert (table.loc["dup", "n"], table.loc["dup", "runs"]) == (1, 2)
    assert math.isnan(table.loc["dup", "ci_lo"])                  # one seed: no interval


def test_unknown_baseline_lists_labels():
    runs = _runs([("bf16", 0, 2.0), ("nvfp4", 0, 2.1)])
    with pytest.raises(ValueError, match=r"'fp32'.*\['bf16', 'nvfp4'\]"):
        recipe_table(runs, baseline="fp32")
    with pytest.raises(ValueError, match=r"\['bf16', 'nvfp4'\]"):
        paired_gaps(runs, "fp32", "final_val_loss")


def test_paired_pairs_equal_keys_and_is_positive_where_the_first_has_the_higher_loss():
    of = pd.DataFrame({"seed": [0, 1, 2], "arm": "x", "loss": [2.2, 3.0, 1.0]})
    against = pd.DataFrame({"seed": [1, 0, 3], "loss": [3.0, 2.0, 9.0]})
    out = paired(of, against, ["seed"])
    assert list(out["seed"]) == [0, 1] and list(out["arm"]) == ["x", "x"]
    assert list(out["loss_against"]) == [2.0, 3.0]
    assert out["abs_gap"].tolist() == pytest.approx([0.2, 0.0])
    assert out["rel_gap"].tolist() == pytest.approx([0.1, 0.0])
    turned = paired(against, of, ["seed"])
    assert list(turned["seed"]) == [1, 0]                      # in the first table's order
    assert turned["rel_gap"].iloc[1] == pytest.approx(-0.2 / 2.2)
