"""The config hash that guards run directories, across versions of the config schema.

``tests/golden/run_config_2026-12-01.yaml`` is the config.yaml of a real run (the quickstart's
MXFP4 job, seed 0) written on 2026-12-01, before the recipe gained 4/6, row scaling and
MS-EDEN and the model its hybrid keys; that version recorded the hash ``a79acb817d6278e1``
in the run's summary.json. Loaded into today's schema (which adds the new keys at their
defaults, as composing the same command does today) it must hash the same, or every run and
sweep started before an upgrade would be refused as "a different config" on resume.
"""
from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf

from nvfp4_lab.config.job import Job
from nvfp4_lab.config.schema import RootConfig
from nvfp4_lab.rundir import ADDED, VOLATILE, config_hash

GOLDEN = Path(__file__).parents[2] / "golden" / "run_config_2026-12-01.yaml"
PUBLISHED = Path(__file__).parents[3] / "results"
RECORDED = "a79acb817d6278e1"


def today(overrides: dict | None = None):
    cfg = OmegaConf.merge(OmegaConf.structured(RootConfig), OmegaConf.load(GOLDEN))
    return OmegaConf.merge(cfg, overrides or {})


def test_a_run_from_before_the_new_keys_hashes_as_it_did():
    cfg = today()
    assert cfg.model.pattern == "" and cfg.quant.four_over_six.operands == []  # added keys
    assert config_hash(cfg, world=1) == RECORDED


def _leaves(d: dict, prefix: str = "") -> set[str]:
    """{"a": {"b": 1, "c": {}}} -> {"a.b", "a.c"}"""
    out = set()
    for k, v in d.items():
        out |= _leaves(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {prefix + k}
    return out


def test_every_key_added_since_the_first_hash_says_what_means_off():
    """A schema field added without an ``ADDED`` entry would change the hash of every run
    from before it: this fails first, naming the key."""
    first = _leaves(OmegaConf.to_container(OmegaConf.load(GOLDEN)))
    schema = _leaves(OmegaConf.to_container(OmegaConf.structured(RootConfig)))
    covered = {key for _, keys in ADDED.values() for key in keys} | set(VOLATILE)
    missing = [k for k in sorted(schema - first)
               if not any(k == c or k.startswith(c + ".") for c in covered)]
    assert not missing, f"schema keys with no entry in rundir.ADDED: {missing}"
    assert schema - first, "the schema has grown since 2026-12-01: the check has work"
    assert all(switch in schema for switch in ADDED)


def test_the_new_keys_count_once_they_select_something():
    """A hybrid, a fractional FFN, or any of the new quantizers is another run."""
    changed = [{"model": {"pattern": "M-M*-", "n_layers": 5}},
               {"model": {"ffn_mult": 3.5}},
               {"quant": {"four_over_six": {"operands": ["fprop.x"]}}},
               {"quant": {"row_scaled": ["fprop.x"]}},
               {"quant": {"ms_eden": ["dgrad.dy"]}},
               {"branch_from": "nvfp4"},
               {"data": {"order": "sequential"}},
               {"data": {"format": "nanogpt"}},
               {"data": {"train": "*train*.bin", "val": "*val*.bin"}}]
    hashes = {config_hash(today(c), world=1) for c in changed}
    assert len(hashes) == len(changed) and RECORDED not in hashes


def test_keys_that_do_not_change_the_computation_are_left_out():
    quiet = {"resume": "never", "trainer": {"progress": "none"},
             "logger": {"wandb": True, "project": "p", "entity": "e", "mode": "offline"}}
    assert config_hash(today(quiet), world=1) == RECORDED
    # the Mamba-2 shape of a transformer (no pattern) changes nothing either
    assert config_hash(today({"model": {"mamba_state": 64}}), world=1) == RECORDED
    assert config_hash(today({"seed": 1}), world=1) != RECORDED


def test_the_layout_is_hashed_as_the_slots_it_makes():
    """2 DDP ranks compute what one process accumulating 2 micro-batches does
    (docs/scaling_out.md): one hash. A batch of 2b, 4 ranks, or FSDP are other runs."""
    ddp = {"trainer": {"strategy": "ddp", "devices": "auto"}}
    accumulating = config_hash(today({"train": {"accumulate": 2}}), world=1)
    assert config_hash(today(ddp), world=2) == accumulating != RECORDED
    assert config_hash(today(ddp), world=1) == RECORDED
    batch = today()["train"]["batch_size"]
    others = {config_hash(today({"train": {"batch_size": 2 * batch}}), world=1),
              config_hash(today(ddp), world=4),
              config_hash(today({"trainer": {"strategy": "fsdp"}}), world=2)}
    assert accumulating not in others and len(others) == 3


def test_prepared_data_in_the_user_cache_hashes_as_the_old_default():
    """Prepared data moved from ``${output_root}/data`` (the old default) to the user cache
    (``data.cache_dir: null``): a run from before still resumes, under any output_root, and
    the data's place never made another run of it."""
    assert today()["data"]["cache_dir"] == "outputs/data"      # what the first runs hashed
    assert config_hash(today({"data": {"cache_dir": None}}), world=1) == RECORDED
    moved = {"output_root": "/scratch/me", "data": {"cache_dir": "/scratch/me/data"}}
    assert config_hash(today({**moved, "data": {"cache_dir": None}}), world=1) == \
        config_hash(today(moved), world=1)


def test_the_packaged_configs_put_prepared_data_in_the_user_cache():
    from nvfp4_lab.configs import conf_dir

    for path in sorted((conf_dir() / "data").glob("*.yaml")):
        node = OmegaConf.load(path)
        if "defaults" in node:            # a preset: its parent option, checked here too
            continue
        assert node["cache_dir"] is None, path


def test_every_published_run_hashes_as_its_summary_recorded():
    """Each published run's config.yaml, loaded into today's schema and resolved into its
    Job, hashes to the config_hash of its summary.json: so rerunning its command finds it
    done."""
    schema = OmegaConf.structured(RootConfig)
    runs = [p.parent for p in sorted(PUBLISHED.rglob("config.yaml"))
            if (p.parent / "summary.json").is_file()]
    assert len(runs) > 200
    recorded = {run: json.loads((run / "summary.json").read_text())["config_hash"]
                for run in runs}
    wrong = [str(run) for run in runs if recorded[run] != Job.of_arm(
        OmegaConf.merge(schema, OmegaConf.load(run / "config.yaml"))).config_hash]
    assert not wrong, f"{len(wrong)} of {len(runs)} published runs: {wrong[:3]}"
