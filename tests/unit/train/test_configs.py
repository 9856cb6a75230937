"""Every shipped config composes, and a composed quant option is its preset."""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
import yaml
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from nvfp4_lab.config.schema import LoggerConfig, apply_arm, recipe_of
from nvfp4_lab.configs import conf_dir
from nvfp4_lab.quant import PRESETS, from_dict, to_dict
from nvfp4_lab.sweepdir import sweep_params

CONF = conf_dir()
GROUPS = ("model", "quant", "data", "train", "trainer", "launcher", "logger")
OPTIONS = [(g, p.stem) for g in GROUPS for p in sorted((CONF / g).glob("*.yaml"))]
ABLATIONS = sorted(p.stem for p in (CONF / "ablation").glob("*.yaml"))


def test_every_group_has_options():
    assert {g for g, _ in OPTIONS} == set(GROUPS)
    assert {"formats", "components", "token_efficiency", "precision_switch", "cumulative",
            "bf16_layers", "sr_placement", "rht_gemms", "rht_size", "rht_signs", "consistency",
            "smoke", "quickstart"} <= set(ABLATIONS)


def test_where_a_run_reports_names_no_job_directory():
    """``logger=wandb`` (or any logger key) added to a sweep run again into its directory
    finds the same job directories: the keys are left out of ``override_dirname``."""
    hydra = OmegaConf.load(CONF / "config.yaml").hydra
    excluded = set(hydra.job.config.override_dirname.exclude_keys)
    assert {"logger", *(f"logger.{f.name}" for f in fields(LoggerConfig))} <= excluded


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_option_composes(composer, group, option):
    extra = ["data.path=/tmp"] if option in ("textdir", "bin") else []
    cfg = composer([f"{group}={option}", *extra])
    if group == "quant":
        assert recipe_of(cfg.quant) == PRESETS[option]
    elif group == "model":
        assert cfg.model.name == option
    OmegaConf.to_container(cfg, resolve=True)   # every interpolation resolves


@pytest.mark.parametrize("ablation", ABLATIONS)
def test_ablation_composes_with_its_arms(composer, ablation):
    cfg = composer([f"+ablation={ablation}"])
    text = (CONF / "ablation" / f"{ablation}.yaml").read_text()
    assert text.startswith("# @package _global_\n# ")   # a header naming what it reproduces
    params = sweep_params(CONF / "ablation" / f"{ablation}.yaml")
    seeds = str(params["seed"]).split(",")
    if ablation not in ("smoke", "quickstart"):       # effects under 1%: >= 3 seeds
        assert len(seeds) >= 3
    arms = str(params.get("arm", "")).split(",") if "arm" in params else []
    assert arms == list(cfg.arms)                      # every arm is swept, no stray ones
    assert ("arm: ${arm_sweep:}" in text) == bool(cfg.arms)      # named once, under arms:
    names = set()
    for arm in arms:
        cfg.arm = arm
        recipe = recipe_of(apply_arm(cfg).quant)
        assert recipe.name == arm
        names.add(str(sorted(to_dict(recipe).items())).replace(arm, ""))
    assert len(names) == len(arms) or ablation == "token_efficiency"   # arms differ


V2 = sorted(a for a in ABLATIONS if a.endswith("_v2"))


@pytest.mark.parametrize("ablation", V2)
def test_design_v2_is_the_lab_scale_with_every_step_logged(composer, ablation):
    """A design-v2 file starts from the design (conf/design/v2.yaml: the lab scale, every step
    logged), which it does not copy; it is named for its v1 ablation (whose paper entry it is
    tested against) and seed-major. The design on the v1 file composes the same run."""
    scale = yaml.safe_load((CONF / "scale" / "lab.yaml").read_text())
    text = (CONF / "ablation" / f"{ablation}.yaml").read_text()
    assert "  - /design: v2\n" in text and "/scale" not in text and "log_every" not in text
    cfg = composer([f"+ablation={ablation}"])
    v1 = composer([f"+ablation={ablation.removesuffix('_v2')}", "+design=v2"])
    assert OmegaConf.to_container(v1.train) == OmegaConf.to_container(cfg.train)
    assert (cfg.model.name, cfg.data.tokenizer, cfg.name) == ("nano", "bytes",
                                                               ablation.removesuffix("_v2"))
    assert {k: cfg.train[k] for k in scale["train"]} == {**scale["train"], "log_every": 1}
    params = yaml.safe_load((CONF / "ablation" / f"{ablation}.yaml").read_text())
    assert list(params["hydra"]["sweeper"]["params"])[0] == "seed"     # seed-major


@pytest.mark.parametrize("ablation", sorted(set(ABLATIONS) - {"smoke", "quickstart", *V2}))
def test_lab_scale_composes_onto_every_ablation(composer, ablation):
    """+scale=lab sets the scale and leaves the ablation's own recipe and settings alone."""
    scale = yaml.safe_load((CONF / "scale" / "lab.yaml").read_text())
    alone = composer([f"+ablation={ablation}"])
    cfg = composer([f"+ablation={ablation}", "+scale=lab"])
    assert (cfg.model.name, cfg.data.tokenizer) == ("nano", "bytes")
    for key, value in scale["train"].items():
        assert cfg.train[key] == value
    assert cfg.trainer.threads == scale["trainer"]["threads"]
    assert cfg.quant.backend == scale["quant"]["backend"]
    assert OmegaConf.masked_copy(cfg.quant, [k for k in cfg.quant if k != "backend"]) == \
        OmegaConf.masked_copy(alone.quant, [k for k in alone.quant if k != "backend"])
    assert cfg.arms == alone.arms and cfg.train.stats_every == alone.train.stats_every


@pytest.mark.parametrize(("overrides", "message"), [
    (["quant.format=nvfp5"], "expected one of [bf16, fp8, mxfp4, nvfp4]"),
    (["quant.rht.sise=4"], "sise"),
    (["quant.weight_blocks=3d"], "expected one of [1d, 1d_same_dim, 2d]"),
    (["train.max_stepz=3"], "max_stepz"),
    (["train.schedule=linear"], "expected one of [wsd, cosine]"),
])
def test_bad_key_or_value_fails_at_compose(composer, overrides, message):
    with pytest.raises((ConfigCompositionException, ValidationError, ConfigKeyError)) as err:
        composer(overrides)
    text = f"{err.value} {err.value.__cause__}"
    assert message in text


def test_unknown_option_names_the_choices(composer):
    with pytest.raises(ConfigCompositionException) as err:
        composer(["quant=nvfp5"])
    assert "nvfp4_base" in str(err.value)     # Hydra lists the available options


def test_preset_arm_keeps_the_configured_backend(composer):
    cfg = composer(["+ablation=token_efficiency", "arm=mxfp4_1.5x", "quant.backend=reference"])
    out = apply_arm(cfg)
    assert out.quant.backend == "reference" and out.quant.format == "mxfp4"
    assert out.train.tokens_multiplier == 1.5


def test_unknown_arm_is_refused(composer):
    cfg = composer(["+ablation=components", "arm=nope"])
    with pytest.raises(ValueError, match="arm='nope' is not one of full, without_sr"):
        apply_arm(cfg)


def test_switch_at_step_and_at_fraction_compose(composer):
    switch = recipe_of(composer(["quant.switch.at_step=3"]).quant).switch
    assert (switch.at_step, switch.at_fraction, switch.step(None)) == (3, None, 3)
    switch = recipe_of(composer(["quant.switch.at_fraction=0.5", "quant.switch.passes=fwd"]
                                ).quant).switch
    assert (switch.at_step, switch.at_fraction, switch.passes) == (None, 0.5, "fwd")
    assert switch.step(300) == 150
    # 1 is a step under at_step and the end of the run under at_fraction
    assert recipe_of(composer(["quant.switch.at_step=1"]).quant).switch.step(300) == 1
    assert recipe_of(composer(["quant.switch.at_fraction=1"]).quant).switch.step(300) == 300
    assert recipe_of(composer([]).quant).switch.step(300) is None


@pytest.mark.parametrize(("overrides", "needles"), [
    (["quant.switch.at=0.5"],
     ["quant.switch.at=0.5", "quant.switch.at_step", "quant.switch.at_fraction"]),
    (["quant.switch.at=1"], ["quant.switch.at=1", "quant.switch.at_step",
                             "quant.switch.at_fraction"]),
    (["quant.switch.at_step=3", "quant.switch.at_fraction=0.5"],
     ["set one of quant.switch.at_step, quant.switch.at_fraction"]),
    (["quant.switch.at_step=0.82"], ["quant.switch.at_step=0.82",
                                     "quant.switch.at_fraction=0.82"]),
    (["quant.switch.at_fraction=5"], ["quant.switch.at_fraction=5", "quant.switch.at_step=5"]),
], ids=["old-at-fraction", "old-at-step", "both", "step-fraction", "fraction-step"])
def test_bad_switch_override_names_the_keys(composer, overrides, needles):
    cfg = composer(overrides)
    with pytest.raises(ValueError) as err:
        recipe_of(cfg.quant)
    for needle in needles:
        assert needle in str(err.value), (needle, str(err.value))


def test_precision_switch_arms_switch_where_at_did():
    """The E04 arms, now at_fraction, switch at the step the old fractional `at` gave."""
    arms = yaml.safe_load((CONF / "ablation" / "precision_switch.yaml").read_text())["arms"]
    fractions = {name: arm["quant"]["switch"]["at_fraction"] for name, arm in arms.items()
                 if "switch" in arm.get("quant", {})}
    assert fractions == {"switch_both_0.82": 0.82, "switch_fwd_0.82": 0.82,
                         "switch_bwd_0.82": 0.82, "switch_both_0.99": 0.99}
    for fraction in fractions.values():
        switch = from_dict({"switch": {"at_fraction": fraction}}).switch
        for max_steps in (300, 1000, 10_000):
            assert switch.step(max_steps) == round(fraction * max_steps)


def test_conf_dir_is_the_packaged_tree_and_the_checkout_links_to_it(monkeypatch):
    monkeypatch.delenv("NVFP4_LAB_CONF", raising=False)
    import nvfp4_lab

    assert conf_dir() == Path(nvfp4_lab.__file__).resolve().parent / "conf"
    assert (Path(__file__).resolve().parents[3] / "conf").resolve() == conf_dir()


def test_conf_dir_from_the_environment_and_its_errors(monkeypatch, tmp_path):
    from nvfp4_lab.configs import conf_source

    monkeypatch.setenv("NVFP4_LAB_CONF", str(tmp_path))
    with pytest.raises(SystemExit, match=r"no config.yaml in .*NVFP4_LAB_CONF.*point "
                                         r"NVFP4_LAB_CONF at a directory"):
        conf_source()
    (tmp_path / "config.yaml").write_text("seed: 0\n")
    assert conf_source().path == tmp_path.resolve()
    assert "NVFP4_LAB_CONF" in conf_source().describe()


def test_presets_follow_the_tree_the_command_line_composes(monkeypatch, tmp_path):
    """A copy of the tree with nvfp4's RHT at 32 points: quant=nvfp4, an arm's preset and
    every recipe that starts from nvfp4 (``defaults: [nvfp4]``) read 32 there, 16 here."""
    import shutil

    from nvfp4_lab.model import MODEL_PRESETS

    tree = tmp_path / "conf"
    shutil.copytree(CONF, tree)
    recipe = yaml.safe_load((tree / "quant" / "nvfp4.yaml").read_text())
    recipe["rht"]["size"] = 32
    (tree / "quant" / "nvfp4.yaml").write_text(yaml.safe_dump(recipe))
    (tree / "model" / "nano.yaml").write_text(
        (tree / "model" / "nano.yaml").read_text().replace("n_layers: 5", "n_layers: 3"))
    starts = [p.stem for p in (CONF / "quant").glob("*.yaml")
              if "nvfp4" in (yaml.safe_load(p.read_text()).get("defaults") or [])]
    assert {"nvfp4_4over6", "nvfp4_row_scaled", "nvfp4_base"} <= set(starts)
    here = {n: PRESETS[n].rht.size for n in ["nvfp4", *starts]}
    monkeypatch.setenv("NVFP4_LAB_CONF", str(tree))
    assert {n: PRESETS[n].rht.size for n in here} == {n: 32 for n in here}
    assert MODEL_PRESETS["nano"].n_layers == 3
    monkeypatch.delenv("NVFP4_LAB_CONF")
    assert {n: PRESETS[n].rht.size for n in here} == here == {n: 16 for n in here}
    assert MODEL_PRESETS["nano"].n_layers == 5


@pytest.mark.parametrize("ablation", sorted(set(ABLATIONS) - {"smoke", "quickstart", "scaling",
                                                              "steps_vs_size", *V2}))
def test_gpu_scale_composes_onto_every_ablation(composer, ablation):
    """+scale=gpu_124m sets the model, the data and one GPU, and leaves the ablation's recipe
    and arms alone."""
    alone = composer([f"+ablation={ablation}"])
    cfg = composer([f"+ablation={ablation}", "+scale=gpu_124m"])
    assert (cfg.model.name, cfg.data.source, cfg.data.vocab_size, cfg.trainer.accelerator) == \
        ("gpt2_small", "shards", 50304, "gpu")
    assert cfg.quant == alone.quant and cfg.arms == alone.arms


def test_gpu_scale_states_its_tokens_per_parameter(composer):
    """20 tokens per non-embedding parameter, counted by the model's own modules, in steps
    of 524,288 tokens: the numbers its file and its model's file state."""
    from helpers.gpu_scale import params

    from nvfp4_lab.config.job import Job

    job = Job.resolve(composer(["+scale=gpu_124m"]))
    n = params("gpt2_small")
    assert job.tokens_per_step == 8 * 1024 * 64 == 524_288
    assert job.max_steps == -(-20 * n // 524_288)
    text = (CONF / "scale" / "gpu_124m.yaml").read_text()
    assert f"20 x {n:,} = {20 * n:,} tokens" in text and f"{job.max_steps} steps" in text
    assert f"{n:,} non-embedding" in (CONF / "model" / "gpt2_small.yaml").read_text()
    assert f"{n + 2 * 50304 * 768:,} in all" in (CONF / "model" / "gpt2_small.yaml").read_text()
