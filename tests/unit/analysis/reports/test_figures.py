"""The figures, read back from what they draw: bar heights, error bars and axis labels against
the numbers handed in."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.container import BarContainer

from nvfp4_lab.analysis import collect, efficiency_table, figures
from nvfp4_lab.analysis.reports import paper_figures
from nvfp4_lab.analysis.sources.paper import load_paper
from nvfp4_lab.config.schema import TrainConfig
from nvfp4_lab.model import ModelConfig
from nvfp4_lab.quant import Backend, preset
from nvfp4_lab.train.module import LMTask

COLOURS = {"bf16": "C0", "nvfp4": "C1", "mxfp4": "C2", "fp8": "C3"}


def _bars(ax) -> BarContainer:
    (bars,) = [c for c in ax.containers if isinstance(c, BarContainer)]
    return bars


def _heights(ax) -> list[float]:
    return [bar.get_height() for bar in _bars(ax)]


def _error_spans(ax) -> list[tuple[float, float]]:
    """(bottom, top) of each drawn error bar."""
    lines = _bars(ax).errorbar.lines[2][0]
    return [(min(s[0][1], s[1][1]), max(s[0][1], s[1][1])) for s in lines.get_segments()]


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def _numbers(ax) -> dict[str, tuple[float, float]]:
    """Each number written on a panel -> the (x, y) it is anchored at."""
    return {t.get_text(): tuple(t.xy) for t in ax.texts if t.get_rotation() == 0}


def test_a_gap_panel_puts_the_papers_train_gap_and_our_validation_gap_on_their_own_axes():
    """formats: the paper's 8B train-loss gaps (stored as it prints them, read positive =
    worse) beside our validation-loss gaps; different losses at different scales, so each
    panel has its own y-range and names its loss; every number stands beyond its error bar
    (not on it), and the slot the paper left empty (FP8) says n/a."""
    paper = load_paper("formats")
    ours = pd.DataFrame({"label": ["bf16", "fp8", "nvfp4", "mxfp4"],
                         "value": [0.0, 0.31, 0.95, 1.52],
                         "lo": [np.nan, 0.10, 0.54, 1.08], "hi": [np.nan, 0.52, 1.36, 1.96]})
    colours = {lb: COLOURS[lb] for lb in ours["label"]}
    fig = paper_figures.paper_figure(paper, ours, colours, "this run", "bf16", "nats/byte")
    left, right = fig.axes
    assert _heights(left)[::2] == [0.0, 1.5] and math.isnan(_heights(left)[1])
    assert _heights(left)[3] == 2.5                            # the file's -2.5, turned
    assert _heights(right) == [0.0, 0.31, 0.95, 1.52]
    spans = _error_spans(right)
    assert spans[2] == pytest.approx((0.54, 1.36)) and spans[3] == pytest.approx((1.08, 1.96))
    assert spans[0] == (0.0, 0.0)                              # the baseline: no interval
    assert left.get_ylim() != right.get_ylim()                 # train gap vs validation gap
    assert left.get_ylabel() == "train loss gap, % (positive = worse) vs bf16"
    assert right.get_ylabel() == "validation loss gap to bf16, % (positive = worse)"
    assert "different losses at different scales" in fig._suptitle.get_text()
    numbers = _numbers(right)
    assert numbers["+0.95"] == pytest.approx((2, 1.36))        # at the whisker's end
    assert numbers["+1.52"] == pytest.approx((2 + 1, 1.96))
    assert numbers["+0.00"] == pytest.approx((0, 0.0))         # no interval: at the bar
    assert _numbers(left)["n/a"] == (1, 0)                     # fp8: the paper has no number


def test_a_validation_gap_shares_its_axis_with_ours():
    """consistency: the paper's own validation-loss gaps, the quantity ours is: one range."""
    paper = load_paper("consistency")
    labels = [lb for lb in paper.values][:3]
    ours = pd.DataFrame({"label": labels, "value": [0.0, 0.5, 0.9],
                         "lo": [np.nan, 0.2, 0.4], "hi": [np.nan, 0.8, 1.4]})
    fig = paper_figures.paper_figure(paper, ours, dict(zip(labels, ("C0", "C1", "C2"))),
                                     "this run", labels[0], "nats/byte")
    left, right = fig.axes
    assert left.get_ylim() == right.get_ylim()
    assert _heights(left) == [paper.values[lb] for lb in labels]
    assert "different losses" not in fig._suptitle.get_text()


def test_a_loss_panel_names_each_sides_unit_and_shows_what_the_paper_could_not():
    paper = load_paper("sr_placement")      # val_loss; sr_activations diverged in the paper
    labels = ["rne", "sr_gradients", "sr_activations"]
    ours = pd.DataFrame({"label": labels, "value": [1.80, 1.79, 1.81],
                         "lo": [1.78, 1.77, 1.79], "hi": [1.82, 1.81, 1.83]})
    fig = paper_figures.paper_figure(paper, ours, dict(zip(labels, ("C0", "C1", "C2"))),
                                     "this run", "rne", "nats/byte")
    left, right = fig.axes
    paper_bars = _heights(left)
    assert math.isnan(paper_bars[0]) and paper_bars[1] == 1.52 and math.isnan(paper_bars[2])
    assert _heights(right) == [1.80, 1.79, 1.81]
    assert left.get_ylabel() == "validation loss (nats/token)"
    assert right.get_ylabel() == "final validation loss (nats/byte)"
    assert [t.get_text() for t in left.texts if t.get_rotation() == 90] == \
        [paper.outcomes["sr_activations"]]
    assert left.get_ylim() != right.get_ylim()              # losses on other data do not
    low, high = left.get_xlim()                 # the paper has no bar at either end: the
    assert low < -0.5 and high > len(labels) - 0.5          # slots are there all the same


def test_the_figure_modules_leave_the_backend_to_the_caller():
    """Importing the figures chooses no backend: a notebook's inline one stays (the command
    line picks a headless one itself, cli.main)."""
    code = ("import matplotlib; matplotlib.use('svg'); "
            "import nvfp4_lab.analysis.reports.figures, nvfp4_lab.analysis.laws.scaling_figures; "
            "print(matplotlib.get_backend())")
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True, timeout=120)
    assert out.stdout.strip() == "svg", out


def _loss_panel(runs_factory, points: int, seeds: int = 1):
    """The train panel of loss_figure over one recipe logged at ``points`` steps, with a
    zigzag train loss (a batch per point) falling from 6.47."""
    steps = list(range(10, 10 * points + 1, 10))
    for seed in range(seeds):
        runs_factory(f"bf16/seed={seed}", seed=seed, steps=steps,
                     train_loss=[6.47 - 0.01 * i + 0.05 * (i % 2) for i in range(points)])
    coll = collect([runs_factory.root])
    fig = figures.loss_figure(coll.runs, coll.curves, coll.axes, {"bf16": "black"})
    means = coll.curves.groupby("tokens")["train_loss"].mean()
    return fig.axes[0], means.to_numpy()


@pytest.mark.parametrize("points", [2, 5, 40, 59])
def test_a_short_train_curve_is_drawn_as_logged(runs_factory, points):
    """Below 3 / 5% = 60 points no window of 3 fits within 5% of the points: the bold line
    is the points themselves (two points are not turned into their mean), nothing faint is
    drawn under it, and the title says so."""
    ax, raw = _loss_panel(runs_factory, points)
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "bf16"]
    assert line.get_ydata() == pytest.approx(raw)
    assert not [ln for ln in ax.get_lines() if (ln.get_alpha() or 1) < 1]
    assert "as logged" in ax.get_title() and "centred mean" not in ax.get_title()


def test_a_long_train_curve_is_smoothed_over_the_window_its_title_names(runs_factory):
    """120 points: 5% is 6, so the window is the largest odd count within it, 5; each drawn
    point is the mean of the raw points at most 2 away (fewer at the ends), the raw curve
    drawn faint beneath, and the title names 5 points."""
    ax, raw = _loss_panel(runs_factory, 120)
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "bf16"]
    near = [raw[max(i - 2, 0):i + 3] for i in range(len(raw))]
    assert line.get_ydata() == pytest.approx([w.mean() for w in near])
    (faint,) = [ln for ln in ax.get_lines() if (ln.get_alpha() or 1) < 1]
    assert faint.get_ydata() == pytest.approx(raw)
    assert "centred mean of 5 points" in ax.get_title()


def _budget_runs(runs_factory, reference: str = "bf16", last: str = "bpe") -> pd.DataFrame:
    """Arms of a token-efficiency sweep: the reference (bf16) and mxfp4 at 1x on bytes,
    mxfp4 at 1.25x on the tokenizer ``last``."""
    for arm, quant, steps, tok in ((reference, "bf16", [10, 20, 40], "bytes"),
                                   ("mxfp4_1x", "mxfp4", [10, 20, 40], "bytes"),
                                   ("mxfp4_1.25x", "mxfp4", [10, 20, 50], last)):
        runs_factory(f"{arm}/seed=0", quant=quant, arm=arm, steps=steps,
                     val_loss=[None, None, 3.1 if quant == "mxfp4" else 3.0],
                     config={"data.tokenizer": tok})
    return collect([runs_factory.root]).runs


def test_token_efficiency_never_joins_losses_of_two_units(runs_factory):
    """A bytes point and a BPE point of one recipe are not one curve: refused, naming why."""
    runs = _budget_runs(runs_factory)
    with pytest.raises(ValueError, match=r"tokenizer: bytes \(2 runs\), bpe \(1 run\)"):
        figures.efficiency_figure(runs, "bf16", efficiency_table(runs, "bf16"))


def test_a_long_title_fits_its_figure(runs_factory):
    """The token-efficiency title, with a long reference label, stays inside the figure."""
    reference = "bf16_reference_at_the_full_budget"
    runs = _budget_runs(runs_factory, reference, last="bytes")
    fig = figures.efficiency_figure(runs, reference, efficiency_table(runs, reference))
    fig.canvas.draw()
    box = fig.axes[0].title.get_window_extent(fig.canvas.get_renderer())
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height


def test_the_gap_figure_names_its_loss_and_sign(runs_factory):
    """A gap over train loss says train loss, and which way is worse, on axis and title."""
    for quant, loss in (("bf16", 3.0), ("nvfp4", 3.06)):
        runs_factory(f"{quant}/seed=0", quant=quant, train_loss=[loss] * 4)
    coll = collect([runs_factory.root])
    fig, gaps = figures.gap_figure(coll.runs, coll.curves, coll.axes,
                                   {"bf16": "black", "nvfp4": "green"}, "bf16", "train_loss")
    ax = fig.axes[0]
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "nvfp4"]
    assert line.get_ydata() == pytest.approx([2.0] * 4)       # 3.06 is 2% above 3.0: worse
    assert ax.get_ylabel().startswith("train loss gap to bf16, %")
    assert "positive = worse" in ax.get_ylabel() and "train loss" in ax.get_title().lower()


def _first_step_below_the_peak(train: TrainConfig) -> int:
    """The first optimizer step after the peak whose learning rate is below it, read from the
    scheduler the trainer configures, stepped once per optimizer step as Lightning does."""
    tiny = ModelConfig(d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, vocab_size=64)
    task = LMTask(tiny, preset("bf16"), train, seed=0, max_steps=train.max_steps,
                  tokens_per_step=1, bytes_per_token=None)
    task.backend = Backend()
    task.configure_model()
    configured = task.configure_optimizers()
    opt, scheduler = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
    rates = []
    for _ in range(train.max_steps):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    peak = rates.index(max(rates))
    return next(s for s in range(peak, len(rates)) if rates[s] < rates[peak])


@pytest.mark.parametrize("max_steps, decay, warmup", [
    (45, 0.1, 0.05), (25, 0.1, 0.05),   # decay x steps ends in .5: round() keeps it even
    (40, 0.25, 0.05), (300, 0.15, 0.05), (33, 0.15, 0.1),
    (20, 1.0, 0.05),                     # the decay overlaps warmup: the rate falls after it
])
def test_the_shaded_decay_starts_where_the_trainers_learning_rate_starts_to_fall(
        runs_factory, max_steps, decay, warmup):
    train = TrainConfig(max_steps=max_steps, decay=decay, warmup=warmup)
    falls = _first_step_below_the_peak(train)
    runs_factory("bf16", steps=list(range(1, max_steps + 1)),
                 config={"train.decay": decay, "train.warmup": warmup,
                         "train.min_lr_ratio": train.min_lr_ratio})
    coll = collect([runs_factory.root])
    fig = figures.loss_figure(coll.runs, coll.curves, coll.axes, {"bf16": "black"})
    for ax in fig.axes:
        (span,) = [p for p in ax.patches if p.get_label() == "LR decay"]
        assert span.get_x() == falls * runs_factory.tokens_per_step
