"""The time left in a job and in its sweep (``train/progress.py``), on a fake clock."""
from __future__ import annotations

import pytest

from nvfp4_lab.console import duration
from nvfp4_lab.sweep.plan import PlannedJob, SweepPlan
from nvfp4_lab.train import progress
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


def test_the_pace_is_the_later_half_of_the_steps_done(clock):
    """5 s a step for the first 10 (a probe on the reference), then 1 s: at step 20 the pace
    is steps 10-20's, 1 s, not the 3 s since the start; at step 40, steps 20-40's."""
    countdown = Countdown()
    countdown.start(step=0)
    clock[0] += 50.0
    assert countdown.left(10, 100)[0] == pytest.approx(90 * 5.0)
    clock[0] += 10.0
    assert countdown.left(20, 100)[0] == pytest.approx(80 * 1.0)
    clock[0] += 40.0                               # steps 20-40 at 2 s
    assert countdown.left(40, 100)[0] == pytest.approx(60 * 2.0)


def test_a_pause_does_not_count_against_the_pace(clock):
    """Logged every 10 steps at 2 s a step, then stopped for 20 minutes (SIGSTOP while a
    benchmark ran) between steps 120 and 130: at step 200 the pace over steps 100-200 is still
    about 2 s, where the pause would have made it 14. A validation every 50 steps (+6 s, 1.3x
    a step's time over its interval) is the job's own time and counts."""
    countdown = Countdown()
    countdown.start(step=0)
    for step in range(10, 201, 10):
        clock[0] += 20.0 + (1200.0 if step == 130 else 0.0) + (6.0 if step % 50 == 0 else 0.0)
        left = countdown.left(step, 1000)[0]
    # steps 100-200 less the paused 120-130: 9 intervals of 20 s, two with a validation (150,
    # 200): 192 s for 90 steps
    assert left == pytest.approx(800 * 192.0 / 90)
    clock[0] += 3600.0                             # an hour stopped, then one more interval
    assert countdown.left(210, 1000)[0] == pytest.approx(790 * 192.0 / 90)


def plan(seconds: list[float | None], parallel: int) -> SweepPlan:
    return SweepPlan(tuple(PlannedJob((f"seed={i}",), 600, s, "reference")
                           for i, s in enumerate(seconds)), parallel, cores=2)


@pytest.mark.parametrize("job,seconds,parallel,after,guessed", [
    # one slot: the later jobs in turn after this one's remaining 550 s
    (0, [None, 100.0, 200.0], 1, 550 + 300, False),
    (2, [100.0, 200.0, None], 1, 550, False),                 # the last job: its own remainder
    # two slots, both free when this job ends: 100 -> slot 0 (650), 200 -> slot 1 (750),
    # 50 -> slot 0 (700); the sweep ends with slot 1
    (0, [None, 100.0, 200.0, 50.0], 2, 750, False),
    # a later job never measured counts at this job's length, 600 s: 550 + 600 on one slot
    (1, [300.0, None, None, 40.0], 2, 1150, True),
])
def test_sweep_time_left_lays_the_later_jobs_on_the_slots(clock, job, seconds, parallel, after,
                                                          guessed):
    countdown = Countdown(SweepPosition(job, plan(seconds, parallel)))
    countdown.start(step=0)
    clock[0] += 50.0                               # 50 of 600 steps in 50 s: 1 s/step
    job_left, sweep = countdown.left(50, 600)
    assert job_left == pytest.approx(550.0)
    assert sweep == f"~{duration(after)}" + ("?" if guessed else "")
    assert f"(job {job + 1}/{len(seconds)}, sweep {sweep})" in countdown.text(50, 600)


def test_a_one_job_sweep_has_no_sweep_figure(clock):
    countdown = Countdown(SweepPosition(0, plan([None], 1)))
    countdown.start(step=0)
    clock[0] += 5.0
    assert countdown.left(5, 10) == (pytest.approx(5.0), None)


def test_the_bar_shows_whole_tokens_a_readable_lr_and_no_version(tmp_path):
    """What the rich bar's metrics column prints for a step late in a run (lr decayed)."""
    from types import SimpleNamespace

    import torch
    from lightning.pytorch.callbacks.progress.rich_progress import (
        MetricsTextColumn,
        RichProgressBarTheme,
    )
    from lightning.pytorch.loggers import CSVLogger

    trainer = SimpleNamespace(loggers=[CSVLogger(tmp_path)], progress_bar_metrics={
        "train_loss": torch.tensor(6.1523), "tokens": 81920.0, "lr": 3e-05})
    column = MetricsTextColumn(trainer, "", " ", RichProgressBarTheme().metrics_format)
    column.update(progress.SweepProgressBar(None).get_metrics(trainer, None))
    assert " ".join(column._generate_metrics_texts()) == \
        "train_loss: 6.152 tokens: 81,920 lr: 3.0e-05"


@pytest.mark.parametrize("seconds,text", [(0.4, "0s"), (59.4, "59s"), (60, "1m00s"),
                                          (372, "6m12s"), (3599, "59m59s"), (3600, "1h00m"),
                                          (7830, "2h10m")])
def test_duration(seconds, text):
    assert duration(seconds) == text


def test_the_first_eta_is_the_remaining_steps_at_the_steps_measured_pace(clock, monkeypatch):
    """A job of 100 steps, logged every 10: 1 s a step, but step 6 took 200 s (auto's
    switch: compiling after the probe). The first line's time left is the 90 steps left at
    the 1 s pace the steps ran at, not at 21 s (210 s over 10 steps)."""
    from types import SimpleNamespace

    import torch

    lines: list[str] = []
    monkeypatch.setattr(progress, "say", lambda text, terminal=True: lines.append(text))
    speed = progress.Speedometer(10, tokens_per_step=100, echo=True)
    trainer = SimpleNamespace(global_step=0, max_steps=100, is_global_zero=True,
                              callback_metrics={"train_loss": torch.tensor(2.0)})
    module = SimpleNamespace(log=lambda *args, **kwargs: None)
    speed.on_train_start(trainer, module)
    for step in range(1, 11):
        clock[0] += 200.0 if step == 6 else 1.0
        trainer.global_step = step
        speed.on_train_batch_end(trainer, module, None, None, step - 1)
    (line,) = lines
    assert line.startswith("step 10/100") and line.endswith(f"eta {duration(90 * 1.0)}")
