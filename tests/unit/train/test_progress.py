"""The time left in a job and in its sweep (``train/progress.py``), on a fake clock."""
from __future__ import annotations

import pytest

from nvfp4_lab.train import progress
from nvfp4_lab.train.console import duration
from nvfp4_lab.train.progress import Countdown, SweepPosition


@pytest.fixture
def clock(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    return now


def test_job_time_left_is_the_remaining_steps_at_the_measured_pace(clock):
    countdown = Countdown()
    countdown.start(step=20)                       # resumed at step 20
    assert countdown.left(20, 100) is None and countdown.text(20, 100) == ""
    clock[0] += 30.0                               # 10 steps in 30 s: 3 s/step
    assert countdown.left(30, 100) == (pytest.approx(210.0), None)
    assert countdown.text(30, 100) == "eta 3m30s"


@pytest.mark.parametrize("job,jobs,parallel,after", [
    (0, 18, 1, 17), (16, 18, 1, 1), (17, 18, 1, 0),   # sequential: every later job in turn
    (0, 18, 2, 9), (3, 18, 2, 7), (16, 18, 4, 1),     # parallel: ceil(later / parallel) rounds
])
def test_sweep_time_left_adds_the_later_jobs_in_rounds_of_parallel(clock, job, jobs, parallel,
                                                                   after):
    countdown = Countdown(SweepPosition(job, jobs, parallel))
    countdown.start(step=0)
    clock[0] += 50.0                               # 50 of 600 steps in 50 s: 1 s/step
    job_left, sweep_left = countdown.left(50, 600)
    assert job_left == pytest.approx(550.0)
    assert sweep_left == pytest.approx(550.0 + after * 600.0)
    assert f"(job {job + 1}/{jobs}, sweep ~{duration(sweep_left)})" in countdown.text(50, 600)


def test_a_one_job_sweep_has_no_sweep_figure(clock):
    countdown = Countdown(SweepPosition(0, 1))
    countdown.start(step=0)
    clock[0] += 5.0
    assert countdown.left(5, 10) == (pytest.approx(5.0), None)


@pytest.mark.parametrize("seconds,text", [(0.4, "0s"), (59.4, "59s"), (60, "1m00s"),
                                          (372, "6m12s"), (3599, "59m59s"), (3600, "1h00m"),
                                          (7830, "2h10m")])
def test_duration(seconds, text):
    assert duration(seconds) == text
