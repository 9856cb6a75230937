"""The figures, read back from what they draw: bar heights, error bars and axis labels against
the numbers handed in."""
from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.container import BarContainer

from nvfp4_lab.analysis import figures
from nvfp4_lab.analysis.paper import load_paper

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


def test_a_gap_panel_draws_the_papers_numbers_beside_ours_on_one_scale():
    paper = load_paper("formats")
    ours = pd.DataFrame({"label": ["bf16", "nvfp4", "mxfp4"], "value": [0.0, -0.95, -1.52],
                         "lo": [np.nan, -1.36, -1.96], "hi": [np.nan, -0.54, -1.08]})
    fig = figures.paper_figure(paper, ours, {k: COLOURS[k] for k in ("bf16", "nvfp4", "mxfp4")},
                               "this run", "bf16", "nats/byte")
    left, right = fig.axes
    assert _heights(left) == [0.0, -1.5, -2.5]                 # the paper file's values
    assert _heights(right) == [0.0, -0.95, -1.52]
    spans = _error_spans(right)
    assert spans[1] == pytest.approx((-1.36, -0.54)) and spans[2] == pytest.approx((-1.96, -1.08))
    assert spans[0] == (0.0, 0.0)                              # the baseline: no interval
    assert left.get_ylim() == right.get_ylim()                 # gaps share their units
    assert left.get_ylabel() == "train loss difference (%) vs bf16"
    assert right.get_ylabel() == "validation loss gap (%) vs bf16"
    numbers = {t.get_text() for t in right.texts}
    assert {"+0.00", "-0.95", "-1.52"} <= numbers


def test_a_loss_panel_names_each_sides_unit_and_shows_what_the_paper_could_not():
    paper = load_paper("sr_placement")      # val_loss; sr_activations diverged in the paper
    labels = ["rne", "sr_gradients", "sr_activations"]
    ours = pd.DataFrame({"label": labels, "value": [1.80, 1.79, 1.81],
                         "lo": [1.78, 1.77, 1.79], "hi": [1.82, 1.81, 1.83]})
    fig = figures.paper_figure(paper, ours, dict(zip(labels, ("C0", "C1", "C2"))), "this run",
                               "rne", "nats/byte")
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
