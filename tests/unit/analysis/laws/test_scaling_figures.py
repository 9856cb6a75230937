"""analysis.laws.scaling_figures on synthetic runs drawn from a known law (helpers/scaling_runs.py):
each figure is read back for the numbers it draws."""
import math

import numpy as np
import pytest
from helpers.scaling_runs import SIZES, TPP, A, B, K, hand_cell_means, lstsq_law, make_runs
from scipy import stats

from nvfp4_lab.analysis.inference.stats import Interval
from nvfp4_lab.analysis.laws.holdout import Holdout
from nvfp4_lab.analysis.laws.scaling import Prediction, fit, paired_gaps
from nvfp4_lab.analysis.laws.scaling_figures import plot_gaps, plot_residuals


def test_gap_figure_draws_the_cell_means_and_the_law(tmp_path):
    runs = make_runs(sigma=0.0)
    gaps = paired_gaps(runs, "nvfp4")
    fig = plot_gaps(gaps, fit(gaps, "relative", resamples=10), tmp_path / "gaps.png",
                    ("nvfp4", "bf16"))
    means = hand_cell_means(runs, "relative")
    bars = fig.axes[0].containers
    assert [b.get_label() for b in bars] == list(SIZES)
    for bar in bars:
        mine = means.xs(bar.get_label(), level="size")
        assert bar.lines[0].get_xdata() == pytest.approx(mine.index.get_level_values("tpp"))
        assert bar.lines[0].get_ydata() == pytest.approx(mine.to_numpy(), rel=1e-12)
    laws = [line for line in fig.axes[0].get_lines() if line.get_gid() == "law"]
    for line, n in zip(laws, SIZES.values()):
        x = np.asarray(line.get_xdata())
        assert line.get_ydata() == pytest.approx(K * x ** A * n ** B, rel=1e-9)
    assert len(laws) == 4 and (tmp_path / "gaps.png").stat().st_size > 0
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == [f"{t:g}" for t in TPP]
    assert fig.axes[0].get_ylabel() == "(L_NVFP4 - L_BF16) / L_BF16"


@pytest.mark.parametrize("form", ["relative", "absolute"])
def test_gap_figure_draws_each_seeds_gap(tmp_path, form):
    runs = make_runs(sigma=0.3)
    gaps = paired_gaps(runs, "nvfp4")
    fig = plot_gaps(gaps, fit(gaps, form, resamples=10), tmp_path / "gaps.png", ("nvfp4", "bf16"))
    wide = runs.pivot_table(index=["size", "params", "tokens", "seed"], columns="recipe",
                            values="loss").reset_index()
    wide["gap"] = (wide["nvfp4"] - wide["bf16"]) / (wide["bf16"] if form == "relative" else 1)
    dots = [line for line in fig.axes[0].get_lines() if line.get_gid() == "seeds"]
    assert [d.get_color() for d in dots] == [b.lines[0].get_color() for b in fig.axes[0].containers]
    for line, size in zip(dots, SIZES, strict=True):
        mine = wide[wide["size"] == size].sort_values(["tokens", "seed"])
        assert line.get_xdata() == pytest.approx(mine["tokens"] / mine["params"])
        assert line.get_ydata() == pytest.approx(mine["gap"].to_numpy(), rel=1e-12)
    low, high = fig.axes[0].get_ylim()
    assert low <= wide["gap"].min() and wide["gap"].max() <= high
    legend = fig.axes[0].get_legend().get_window_extent()    # right of every point
    assert legend.x0 >= fig.axes[0].get_window_extent().x1
    assert legend.x1 <= fig.bbox.x1                   # and inside the saved figure


def test_gap_figure_names_the_two_recipes_it_compares(tmp_path):
    gaps = paired_gaps(make_runs(sigma=0.0), "nvfp4")
    fig = plot_gaps(gaps, fit(gaps, "absolute", resamples=10), tmp_path / "gaps.png",
                    ("mxfp4", "nvfp4"))
    assert fig.axes[0].get_ylabel() == "L_MXFP4 - L_NVFP4"
    assert fig.axes[0].get_title().startswith("mxfp4 against nvfp4, absolute gap\n")


def test_gap_figure_sets_sizes_apart_on_screen_and_shows_every_bar_whole(tmp_path):
    runs = make_runs(sigma=0.3)
    gaps = paired_gaps(runs, "nvfp4")
    ax = plot_gaps(gaps, fit(gaps, "relative", resamples=10), tmp_path / "gaps.png",
                   ("nvfp4", "bf16")).axes[0]
    screen_x = [bar.lines[0].get_transform().transform([(2.0, 0.0)])[0, 0]
                for bar in ax.containers]
    assert np.all(np.diff(screen_x) > 0)            # one D/N: the sizes left to right
    hand = gaps.groupby(["params", "tpp"])["rel_gap"].agg(["mean", "std", "count"])
    half = stats.t.ppf(0.975, hand["count"] - 1) * hand["std"] / np.sqrt(hand["count"])
    low, high = ax.get_ylim()
    assert low < (hand["mean"] - half).min() and (hand["mean"] + half).max() < high


def test_residual_figure_draws_log_observed_minus_lstsq_fitted(tmp_path):
    runs = make_runs(sigma=0.1)
    res = fit(paired_gaps(runs, "nvfp4"), "absolute", resamples=10)
    means = hand_cell_means(runs, "absolute")
    log_k, a, b = lstsq_law(means)
    fig = plot_residuals(res, tmp_path / "res.png", ("nvfp4", "bf16"))
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    for size, n in SIZES.items():
        mine = means.xs(size, level="size")
        tpp = mine.index.get_level_values("tpp").to_numpy()
        want = np.log(mine.to_numpy()) - (log_k + a * np.log(tpp) + b * math.log(n))
        assert lines[size].get_xdata() == pytest.approx(tpp)
        assert lines[size].get_ydata() == pytest.approx(want, abs=1e-10)
    assert fig.axes[0].get_title().startswith("nvfp4 against bf16: absolute law residuals")


def test_gap_figure_draws_the_held_out_prediction_right_of_the_sizes(tmp_path):
    gaps = paired_gaps(make_runs(sigma=0.1), "nvfp4")
    # numbers no law gives: the figure draws what it is handed
    held = Holdout("relative", "s2m", 40.0, 19, Prediction("relative", 2e6, 8e7, 0.5, 0.4, 0.9),
                   Interval(0, math.nan, math.nan, math.nan, math.nan))
    ax = plot_gaps(gaps, fit(gaps, "relative", resamples=10), tmp_path / "gaps.png",
                   ("nvfp4", "bf16"), held).axes[0]
    sizes, mark = ax.containers[:-1], ax.containers[-1]
    assert [b.get_label() for b in sizes] == list(SIZES)
    assert mark.get_label().startswith("s2m predicted") and mark.lines[0].get_gid() == "held-out"
    assert list(mark.lines[0].get_xdata()) == [40.0] and list(mark.lines[0].get_ydata()) == [0.5]
    (bar,) = mark.lines[2][0].get_segments()
    assert bar.tolist() == [[40.0, pytest.approx(0.4)], [40.0, pytest.approx(0.9)]]
    low, high = ax.get_ylim()
    assert low < 0.4 and 0.9 < high                             # the whole interval shows
    right = [b.lines[0].get_transform().transform([(40.0, 0.0)])[0, 0] for b in ax.containers]
    assert right[-1] > max(right[:-1])                           # one step right of the sizes
    assert "s2m predicted" in [t.get_text().split("\n")[0] for t in ax.get_legend().get_texts()]
