"""The learning-rate schedule: warmup, WSD's plateau and linear decay, cosine, each down to its
floor; and the step from which the rate falls, where a figure shades the decay."""
from __future__ import annotations

import math

import pytest

from nvfp4_lab.schedule import LRSchedule


@pytest.mark.parametrize("kind", ["wsd", "cosine"])
def test_lr_schedule_shape(kind):
    schedule = LRSchedule(100, kind, warmup=0.1, decay=0.2, min_lr_ratio=0.01)
    f = [schedule.factor(s) for s in range(100)]
    assert f[0] == pytest.approx(0.1) and f[9] == 1.0          # linear warmup over 10 steps
    assert all(0.01 - 1e-12 <= v <= 1.0 for v in f)
    assert all(a >= b for a, b in zip(f[9:], f[10:]))          # never rises after warmup
    if kind == "wsd":
        assert set(f[9:80]) == {1.0}                           # stable until the last 20%
        assert f[99] == pytest.approx(0.01)                     # linear decay to 1% at the end
    else:
        mid = 0.5 * (1 - math.cos(math.pi * 46 / 90))
        assert f[99] == pytest.approx(0.01)
        assert f[55] == pytest.approx(1 - 0.99 * mid)


@pytest.mark.parametrize("schedule, falls", [
    (LRSchedule(45, decay=0.1), 41),                    # round(4.5) = 4 steps decay, not 5
    (LRSchedule(20, decay=1.0, warmup=0.05), 1),        # after the one warmup step
    (LRSchedule(100, decay=0.0), None),                 # no step decays
    (LRSchedule(100, min_lr_ratio=1.0), None),          # decays to the peak: never falls
    (LRSchedule(100, "cosine"), None),                  # falls throughout
])
def test_the_rate_falls_from_the_first_decaying_step_after_warmup(schedule, falls):
    assert schedule.falls_from() == falls
