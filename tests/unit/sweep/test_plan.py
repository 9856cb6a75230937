"""A sweep's plan (``sweep/plan.py``): its jobs' estimates, the sweep's length laid out on
the slots that run at once, and the file the jobs read; checked by hand."""
from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from nvfp4_lab.config.schema import plain, register
from nvfp4_lab.configs import conf_dir
from nvfp4_lab.model import ModelConfig
from nvfp4_lab.quant import cost
from nvfp4_lab.sweep.plan import (
    FILE,
    PlannedJob,
    SweepPlan,
    makespan,
    parallel_jobs,
    plan_job,
    validations,
)


@pytest.mark.parametrize("seconds,parallel,free_at,end", [
    ([], 2, 0.0, 0.0),
    ([5.0, 3.0, 4.0], 1, 0.0, 12.0),
    # slots [0, 0]: 5 -> [5, 0], 3 -> [5, 3], 4 -> [5, 7]
    ([5.0, 3.0, 4.0], 2, 0.0, 7.0),
    # launch order, not the best packing: 1 -> [11, 10], 1 -> [11, 11], 9 -> [20, 11]
    ([1.0, 1.0, 9.0], 2, 10.0, 20.0),
    ([2.0, 2.0], 4, 0.0, 2.0),
])
def test_makespan_takes_each_job_on_the_first_free_slot(seconds, parallel, free_at, end):
    assert makespan(seconds, parallel, free_at) == end


@pytest.mark.parametrize("steps,every,n", [(600, 50, 12), (816, 50, 17), (24, 4, 6),
                                           (3, 4, 1), (10, 0, 0)])
def test_a_run_validates_every_val_every_steps_and_at_its_last(steps, every, n):
    assert validations(steps, every) == n


@pytest.mark.parametrize("launcher,n", [
    ({"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}, 1),
    ({"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher",
      "n_jobs": 3}, 3),
])
def test_parallel_jobs_are_joblibs_n_jobs(launcher, n):
    assert parallel_jobs(launcher) == n


@pytest.mark.parametrize("n_jobs, n", [(-1, 8), (-2, 7), (-9, 1)])
def test_negative_n_jobs_count_from_the_cores_as_joblib_does(monkeypatch, n_jobs, n):
    """joblib: n_jobs = -1 is every core, -2 all but one, ...; never fewer than one."""
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    joblib = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
    assert parallel_jobs({"_target_": joblib, "n_jobs": n_jobs}) == n


def test_the_plan_file_gives_back_the_plan(tmp_path):
    plan = SweepPlan((PlannedJob(("seed=0", "quant=bf16"), 400, 95.5, "compiled"),
                      PlannedJob(("seed=0", "quant=nvfp4"), 400, None, "auto")), 2, 8)
    plan.save(tmp_path)
    assert (tmp_path / FILE).is_file()
    assert SweepPlan.load(tmp_path) == plan
    assert SweepPlan.load(tmp_path / "none") is None
    assert plan.total() == 95.5 and plan.known() == [plan.jobs[0]]


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    monkeypatch.setenv("NVFP4_LAB_CACHE", str(tmp_path))
    return tmp_path / "timings.json"


def test_a_job_is_estimated_from_its_recipes_timing_here(ledger):
    """quickstart's BF16 job with trainer.threads=0: 400 steps of 2048 tokens, a validation
    every 25 (16); two jobs at once on two cores take one thread each. Before it ran here: a
    first estimate from the shipped step times, labelled. Then measured for that key at 100
    ms/step, 2 s start-up, 0.75 s a validation: 2 + 40 + 12 = 54 s, on no backend (nothing is
    quantized)."""
    register()
    overrides = ["+ablation=quickstart", "quant=bf16", "seed=0", "trainer.threads=0"]
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
        other = compose("config",
                        overrides=[*overrides[:1], "quant=fp8", *overrides[2:]])
    first = plan_job(overrides, cfg, parallel=2, cores=2)
    assert first.seconds > 0 and first.estimate.startswith(
        "estimate from the step times shipped for x86_64 ")
    model = plain(cfg.model, ModelConfig)
    model.vocab_size = 256
    key = cost.run_key([], model, 2048, 1)
    cost.record(key, "none", cost.Timing(100.0, 2.0, 0.75))
    job = plan_job(overrides, cfg, parallel=2, cores=2)
    assert (job.steps, job.backend, job.estimate) == (400, "none", "")
    assert job.seconds == pytest.approx(54.0)
    assert plan_job(overrides, cfg, parallel=1, cores=2).estimate   # 2 threads: not measured
    assert plan_job(overrides, other, parallel=2, cores=2).seconds is None  # no FP8 shipped
