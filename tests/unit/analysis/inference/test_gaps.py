"""Known answers for analysis.inference.gaps: interpolation, gap curves, token multipliers."""
import math

import numpy as np
import pandas as pd
import pytest

from nvfp4_lab.analysis.inference.gaps import (
    Multiplier,
    curve_efficiency_table,
    curve_multiplier,
    efficiency_table,
    gap_curves,
    on_grid,
    token_multiplier,
)

T1 = math.tan(math.pi * 0.475)  # t_{0.975,1} (Cauchy closed form) = 12.7062...


def test_on_grid_interpolates_and_never_extrapolates():
    # curve (10, 3), (20, 2), (30, 1.5), given unsorted and with a NaN point to drop
    got = on_grid([30, 10, 20, 25], [1.5, 3.0, 2.0, np.nan], [5, 10, 15, 25, 30, 35])
    # 15: halfway 3 -> 2 = 2.5; 25: halfway 2 -> 1.5 = 1.75; 5 and 35 outside [10, 30]
    np.testing.assert_allclose(got, [np.nan, 3.0, 2.5, 1.75, 1.5, np.nan])


def test_on_grid_edge_cases():
    assert np.isnan(on_grid([], [], [1.0, 2.0])).all()
    assert np.isnan(on_grid([10.0], [np.nan], [10.0])).all()
    # repeated token (a resumed run logging a step twice): values averaged, (10, 3) then (20, 1)
    np.testing.assert_allclose(on_grid([10, 10, 20], [2.0, 4.0, 1.0], [10, 15]), [3.0, 2.0])


def _curve(label, seed, tokens, val):
    return pd.DataFrame({"run": f"{label}-{seed}", "label": label, "seed": seed,
                         "step": np.arange(len(tokens)), "tokens": tokens,
                         "train_loss": np.nan, "val_loss": val})


def _mismatched_curves():
    return pd.concat([
        # seed 0: baseline every 100 tokens (no val at 0), experiment at 50, 150, 250
        _curve("exp", 0, [50, 150, 250], [5.0, 3.2, 2.4]),
        _curve("bf16", 0, [0, 100, 200, 300], [np.nan, 4.0, 3.0, 2.0]),
        # seed 1: baseline at 100, 200, 300; experiment only at 100 and 300
        _curve("bf16", 1, [100, 200, 300], [4.0, 3.2, 2.5]),
        _curve("exp", 1, [100, 300], [4.2, 2.4]),
        # seed 2 has no baseline: must be ignored (it would move every mean)
        _curve("exp", 2, [100, 200, 300], [9.0, 9.0, 9.0]),
        _curve("other", 1, [100, 200, 300], [4.0, 3.2, 2.5]),
    ], ignore_index=True)


def test_gap_curves_on_mismatched_grids():
    out = gap_curves(_mismatched_curves(), "bf16")
    assert list(out.columns) == ["label", "tokens", "n", "mean", "lo", "hi"]
    exp = out[out["label"] == "exp"].set_index("tokens")
    # seed 0 on the baseline's tokens 100, 200 (300 is past the experiment's last point 250):
    #   100: halfway 5.0 -> 3.2 = 4.1, gap (4.1 - 4.0) / 4.0 * 100 = +2.5 (worse)
    #   200: halfway 3.2 -> 2.4 = 2.8, gap (2.8 - 3.0) / 3.0 * 100 = -6.666... (better)
    # seed 1 on 100, 200, 300:
    #   100: 4.2, gap (4.2 - 4.0) / 4.0 * 100 = +5;  200: halfway 4.2 -> 2.4 = 3.3,
    #   gap (3.3 - 3.2) / 3.2 * 100 = +3.125;  300: 2.4, gap (2.4 - 2.5) / 2.5 * 100 = -4
    assert list(exp.index) == [100, 200, 300]
    assert exp["n"].tolist() == [2, 2, 1]
    assert exp["mean"].tolist() == pytest.approx([3.75, (3.125 - 20 / 3) / 2, -4.0])
    # tokens 100: two gaps 2.5, 5 -> sd 2.5 / sqrt(2), half = t_{0.975,1} * 2.5 / 2
    assert exp.loc[100, "lo"] == pytest.approx(3.75 - T1 * 1.25)
    assert exp.loc[100, "hi"] == pytest.approx(3.75 + T1 * 1.25)
    assert math.isnan(exp.loc[300, "lo"]) and math.isnan(exp.loc[300, "hi"])
    # identical curve to the baseline: gap exactly 0, one seed
    other = out[out["label"] == "other"]
    assert other["mean"].tolist() == [0.0, 0.0, 0.0] and other["n"].tolist() == [1, 1, 1]
    assert "bf16" not in set(out["label"])
    assert list(pd.unique(out["label"])) == ["exp", "other"]


def test_gap_curves_unknown_baseline():
    with pytest.raises(ValueError, match=r"\['exp', 'bf16', 'other'\]"):
        gap_curves(_mismatched_curves(), "fp32")


# budgets 100, 125, 150 tokens against a 100-token reference: 1.0x, 1.25x, 1.5x
def test_token_multiplier_monotone_crossing():
    # loss 2.8 at 125, 2.6 at 150: 2.7 is halfway -> 137.5 tokens -> 1.375x (input unsorted)
    m = token_multiplier([150, 100, 125], [2.6, 3.0, 2.8], target=2.7, base_tokens=100)
    assert m.status == "reached" and m.approximate is False
    assert m.value == pytest.approx(1.375)


def test_token_multiplier_exact_hit():
    m = token_multiplier([100, 125, 150], [3.0, 2.8, 2.6], target=2.8, base_tokens=100)
    assert (m.status, m.value) == ("reached", pytest.approx(1.25))


def test_token_multiplier_takes_first_crossing():
    # 3.0, 2.6, 2.9, 2.5: first crossing of 2.7 between 100 and 125 at
    # 100 + (3.0 - 2.7) / (3.0 - 2.6) * 25 = 118.75 (the later one would give 162.5)
    m = token_multiplier([100, 125, 150, 175], [3.0, 2.6, 2.9, 2.5], 2.7, 100)
    assert m.status == "reached" and m.value == pytest.approx(1.1875)


def test_token_multiplier_never_and_already():
    assert token_multiplier([100, 125, 150], [3.0, 2.8, 2.6], 2.5, 100) == Multiplier(
        None, "never", False)
    # the smallest budget (100 tokens) already reaches 3.1: upper bound 100 / 80 = 1.25
    assert token_multiplier([100, 125, 150], [3.0, 2.8, 2.6], 3.1, 80) == Multiplier(
        1.25, "already", False)


def test_token_multiplier_drops_nan_budget():
    # the 125 budget has no loss: interpolate 100 -> 150, 2.8 at 100 + 0.5 * 50 = 125 tokens
    m = token_multiplier([100, 125, 150], [3.0, np.nan, 2.6], 2.8, 100)
    assert m.value == pytest.approx(1.25)


def test_curve_multiplier_is_flagged_approximate():
    m = curve_multiplier([0, 50, 100, 150], [5.0, 3.0, 2.8, 2.6], 2.7, 100)
    assert m == Multiplier(pytest.approx(1.25), "reached", True)


def _run(label, recipe, seed, tokens, loss, status="done"):
    return {"run": f"{label}-{seed}-{status}", "label": label, "seed": seed, "status": status,
            "final_val_loss": loss, "best_val_loss": loss, "final_train_loss": loss,
            "tokens": tokens, "recipe": recipe}


def _efficiency_runs():
    return pd.DataFrame([
        # reference nvfp4 at 100 tokens: targets 2.70 (seed 0), 2.80 (seed 1)
        _run("nvfp4", "nvfp4", 0, 100, 2.70), _run("nvfp4", "nvfp4", 1, 100, 2.80),
        # mxfp4 at 1.0x, 1.25x, 1.5x. seed 0: 3.0, 2.8, 2.6 reaches 2.7 at 1.375x;
        # seed 1: 3.0, 2.9, 2.85 never reaches 2.8
        _run("mxfp4", "mxfp4", 0, 100, 3.0), _run("mxfp4", "mxfp4", 1, 100, 3.0),
        _run("mxfp4_1.25x", "mxfp4", 0, 125, 2.8), _run("mxfp4_1.25x", "mxfp4", 1, 125, 2.9),
        _run("mxfp4_1.5x", "mxfp4", 0, 150, 2.6), _run("mxfp4_1.5x", "mxfp4", 1, 150, 2.85),
        # not done: would make seed 1 reach at 1.75x if counted
        _run("mxfp4_1.75x", "mxfp4", 1, 175, 2.0, status="failed"),
        # a seed the reference lacks: not counted
        _run("mxfp4_1.25x", "mxfp4", 5, 125, 1.0),
        # fp8 at 1.0x, 1.25x. seed 0: 2.75 -> 2.65, 2.7 at 100 + 0.5 * 25 -> 1.125x;
        # seed 1: 2.9 -> 2.78, 2.8 at 100 + (0.1 / 0.12) * 25 = 120.833 -> 1.208333x
        _run("fp8", "fp8", 0, 100, 2.75), _run("fp8", "fp8", 1, 100, 2.90),
        _run("fp8_1.25x", "fp8", 0, 125, 2.65), _run("fp8_1.25x", "fp8", 1, 125, 2.78),
        # int4 never gets there
        _run("int4", "int4", 0, 100, 3.5), _run("int4_1.25x", "int4", 0, 125, 3.4),
        _run("int4", "int4", 1, 100, 3.6), _run("int4_1.25x", "int4", 1, 125, 3.5),
        # bf16's only budget already beats both targets: upper bound 1.0x
        _run("bf16", "bf16", 0, 100, 2.60), _run("bf16", "bf16", 1, 100, 2.65),
    ])


def test_efficiency_table_mixed_outcomes():
    table = efficiency_table(_efficiency_runs(), "nvfp4").set_index("recipe")
    # the reference recipe has a single budget: skipped
    assert list(table.index) == ["mxfp4", "fp8", "int4", "bf16"]
    mx = table.loc["mxfp4"]
    assert (mx["n_seeds"], mx["budgets"], mx["status"]) == (2, "1.0x, 1.25x, 1.5x",
                                                           "mixed: 1/2 reached")
    assert mx["multiplier_mean"] == pytest.approx(1.375)
    assert math.isnan(mx["multiplier_lo"]) and not mx["upper_bound"]
    # fp8: 1.125 and 1.208333 -> mean 1.1666..., sd = 0.083333 / sqrt(2),
    # half = t_{0.975,1} * sd / sqrt(2) = T1 * 0.083333 / 2
    fp8 = table.loc["fp8"]
    assert fp8["status"] == "reached" and fp8["budgets"] == "1.0x, 1.25x"
    assert fp8["multiplier_mean"] == pytest.approx(7 / 6)
    assert fp8["multiplier_lo"] == pytest.approx(7 / 6 - T1 * (1 / 12) / 2)
    assert fp8["multiplier_hi"] == pytest.approx(7 / 6 + T1 * (1 / 12) / 2)
    int4 = table.loc["int4"]
    assert int4["status"] == "never within 1.25x" and math.isnan(int4["multiplier_mean"])
    bf16 = table.loc["bf16"]
    assert (bf16["status"], bf16["multiplier_mean"], bf16["upper_bound"]) == ("reached", 1.0,
                                                                              True)


def test_efficiency_table_includes_reference_recipe_with_other_budgets():
    runs = pd.concat([_efficiency_runs(), pd.DataFrame([
        # nvfp4 at 0.75x: 2.9 (seed 0), 3.0 (seed 1); seed 0 reaches 2.7 exactly at the
        # reference itself (1.0x); seed 1 at 75 + (3.0 - 2.8) / (3.0 - 2.8) * 25 = 100 too
        _run("nvfp4_0.75x", "nvfp4", 0, 75, 2.9), _run("nvfp4_0.75x", "nvfp4", 1, 75, 3.0),
    ])], ignore_index=True)
    table = efficiency_table(runs, "nvfp4").set_index("recipe")
    nv = table.loc["nvfp4"]
    assert (nv["budgets"], nv["status"], nv["multiplier_mean"]) == ("0.75x, 1.0x", "reached",
                                                                    1.0)


def test_efficiency_table_unknown_reference():
    with pytest.raises(ValueError, match="available labels"):
        efficiency_table(_efficiency_runs(), "fp4")


def test_curve_efficiency_reads_each_seeds_curve_against_the_reference_final():
    runs = pd.DataFrame({"run": ["r0", "r1", "n0", "n1"], "label": ["bf16", "bf16", "nv", "nv"],
                         "seed": [0, 1, 0, 1], "status": "done", "tokens": 40,
                         "final_val_loss": [3.0, 3.0, 2.95, 3.1]})
    curves = pd.DataFrame({"run": ["n0"] * 4 + ["n1"] * 4, "label": "nv",
                           "seed": [0] * 4 + [1] * 4, "tokens": [10, 20, 30, 40] * 2,
                           "val_loss": [3.5, 3.2, 3.05, 2.95, 3.5, 3.3, 3.2, 3.1]})
    row = curve_efficiency_table(runs, curves, "bf16").iloc[0]
    # seed 0 crosses 3.0 halfway between 30 and 40 tokens: 35 / 40; seed 1 never gets there
    assert row["label"] == "nv" and row["n_seeds"] == 2
    assert row["multiplier_mean"] == pytest.approx(0.875)
    assert row["status"] == "mixed: 1/2 reached"
