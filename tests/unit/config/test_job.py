"""``Job.resolve``: a composed config and its arm, once, as the typed job every caller reads."""
from __future__ import annotations

import pytest

from nvfp4_lab.config.job import Job
from nvfp4_lab.config.schema import Refused


def test_a_job_counts_its_tokens_and_steps(composer):
    job = Job.resolve(composer(["quant=mxfp4", "train.batch_size=4", "train.seq_len=64",
                                "train.accumulate=2", "train.max_tokens=5000",
                                "train.tokens_multiplier=1.5"]))
    assert job.recipe.format == "mxfp4" and job.arm is None
    assert job.tokens_per_step == 4 * 64 * 2
    assert job.max_steps == round(10 * 1.5)          # ceil(5000 / 512) = 10 steps, x 1.5
    assert job.branch_step is None and job.steps_here == job.max_steps
    # six operands, but 2D weights: Dgrad reuses Fprop's quantized W
    assert {s.fmt for s in job.recipe.specs} == {"mxfp4"} and len(job.recipe.specs) == 5


@pytest.mark.parametrize("model, tpp, steps", [
    ("w32", 2, 46),       # 5 * (9 * 32^2 + 2 * 32) + 32 = 46,432 params; 92,864 / 2048 -> 46
    ("nano", 40, 14428),  # 738,688 * 40 = 29,547,520 tokens / 2048 = 14,427.5 -> 14,428
])
def test_a_run_sized_in_tokens_per_parameter(composer, model, tpp, steps):
    job = Job.resolve(composer([f"model={model}", f"train.tokens_per_param={tpp}"]))
    assert job.tokens_per_step == 2048 and job.max_steps == steps


def test_a_run_length_set_twice_is_refused(composer):
    with pytest.raises(Exception, match="train.tokens_per_param=2.0 and train.max_tokens=5000 "
                                        "both set the run length; set one"):
        Job.resolve(composer(["train.tokens_per_param=2", "train.max_tokens=5000"]))
    with pytest.raises(Exception, match="model.pattern='M-M\\*-M-'.*size hybrid runs by "
                                        "train.max_tokens"):
        Job.resolve(composer(["model=hybrid_nano", "train.tokens_per_param=2"]))


def test_a_branch_trains_its_tail(composer):
    cfg = composer(["+ablation=precision_switch_v2", "arm=switch_fwd_0.82",
                    "train.max_steps=12"])
    job = Job.resolve(cfg)
    assert job.arm == "switch_fwd_0.82"
    assert job.branch_step == 10 and job.steps_here == 2     # round(0.82 * 12) = 10


def test_the_vocabulary_is_the_data_modules_or_its_guess(composer):
    job = Job.resolve(composer(["data=pydoc"]))
    assert job.model.vocab_size == 0
    assert job.sized_model().vocab_size == 256                 # bytes
    assert job.sized_model(300).vocab_size == 300 and job.model.vocab_size == 0


def test_a_bad_arm_is_refused(composer):
    cfg = composer(["+ablation=precision_switch_v2", "arm=nvfp4",
                    "branch_from=switch_fwd_0.82"])
    with pytest.raises(Refused, match="arm 'nvfp4' has none"):
        Job.resolve(cfg)


def test_a_run_on_data_hf_is_refused_with_the_command_that_trains_on_its_shards(composer):
    with pytest.raises(ValueError, match="data=hf prepares shards, it does not train: .* "
                                         "data=shards data.path=/out"):
        Job.resolve(composer(["data=fineweb_edu", "data.path=/out"]))


@pytest.mark.parametrize("ablation, arm", [("components", "without_sr"),
                                           ("precision_switch_v2", "nvfp4")])
def test_one_run_of_a_sweep_job_builds_its_recipe_once(composer, tmp_path, monkeypatch,
                                                       ablation, arm):
    """The job is resolved once: from the composed config to the trained run, whatever reads
    the recipe (the check, the hash, the module, the backend) reads the Job's one ``Recipe``."""
    from helpers.runs import fast

    from nvfp4_lab.quant import Recipe
    from nvfp4_lab.train.task import train

    built = []
    init = Recipe.__init__
    monkeypatch.setattr(Recipe, "__init__", lambda self, *a, **k: built.append(
        init(self, *a, **k)))
    cfg = composer([f"+ablation={ablation}", f"arm={arm}", *fast(tmp_path, 2),
                    "quant.backend=reference", "trainer.threads=1"])
    summary = train(cfg, tmp_path / "run", multirun=True)
    assert summary.status.value == "done" and len(built) == 1
