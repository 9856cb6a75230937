"""The schema: ``TrainerConfig``'s launch rules (devices and nodes from torchrun or srun, the
refusal that comes before anything is written), and ``QuantSchema`` against ``Recipe``."""
from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from nvfp4_lab.config.schema import (
    QuantSchema,
    Refused,
    TrainConfig,
    TrainerConfig,
    launcher_layout,
    process_rank,
    recipe_of,
)
from nvfp4_lab.quant import Recipe

LAUNCHER_KEYS = ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "LOCAL_RANK", "SLURM_NTASKS", "SLURM_NNODES")


@pytest.fixture
def env(monkeypatch):
    for key in LAUNCHER_KEYS:
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


def test_no_launcher_keeps_the_config(env):
    assert launcher_layout() is None
    tr = TrainerConfig(devices=2, num_nodes=3)
    assert tr.layout() == (2, 3) and tr.world_size() == 6
    assert TrainerConfig(devices="auto").world_size() == 1


@pytest.mark.parametrize("launcher, want", [
    ({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "LOCAL_RANK": "1"}, (4, 2)),     # torchrun
    ({"SLURM_NTASKS": "12", "SLURM_NNODES": "3"}, (4, 3)),                          # srun
])
def test_auto_devices_take_the_launchers_processes(env, launcher, want):
    for key, value in launcher.items():
        env.setenv(key, value)
    assert launcher_layout() == want
    tr = TrainerConfig(strategy="ddp", devices="auto")
    assert tr.layout() == want and tr.world_size() == want[0] * want[1]
    tr.check_launch(multirun=False)
    tr.check_launch(multirun=True)      # a sweep's job on the launcher's processes (srun)
    with pytest.raises(Refused, match=r"trainer.devices=1 x trainer.num_nodes=\d is not the "
                                      rf"{want[0] * want[1]} processes"):
        TrainerConfig(strategy="ddp", devices=1).check_launch(multirun=False)


def test_several_devices_in_a_sweep_without_a_launcher_are_refused(env):
    with pytest.raises(Refused, match="trainer.devices=2 inside a sweep"):
        TrainerConfig(strategy="ddp", devices=2).check_launch(multirun=True)
    TrainerConfig(strategy="ddp", devices=2).check_launch(multirun=False)


@pytest.mark.parametrize("bad, message", [
    ({"threads": -3}, "trainer.threads=-3 must be >= 0"),
    ({"num_nodes": 0}, "trainer.num_nodes=0 must be >= 1"),
    ({"devices": 0}, "trainer.devices=0 must be >= 1, a list of device indices, or auto"),
])
def test_a_process_layout_that_cannot_exist_is_refused_by_name(bad, message):
    with pytest.raises(ValueError, match=message):
        TrainerConfig(**bad)
    TrainerConfig(threads=0, num_nodes=1, devices=[0])      # the edges that do exist


@pytest.mark.parametrize("bad, message", [
    ({"lr": -1.0}, "train.lr=-1.0 must be > 0"),
    ({"eps": 0.0}, "train.eps=0.0 must be > 0"),
    ({"min_lr_ratio": 2.0}, r"train.min_lr_ratio=2.0 must be in \[0, 1\]"),
    ({"weight_decay": -0.1}, "train.weight_decay=-0.1 must be >= 0"),
    ({"grad_clip": -1.0}, r"train.grad_clip=-1.0 must be >= 0 \(0: no clipping\)"),
    ({"stats_every": -1}, "train.stats_every=-1 must be >= 0"),
    ({"betas": [0.9, 1.0]}, r"train.betas=\[0.9, 1.0\] must be two numbers in \[0, 1\)"),
    ({"betas": [0.9]}, r"train.betas=\[0.9\] must be two numbers"),
])
def test_an_optimizer_setting_outside_its_meaning_is_refused_by_name(bad, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**bad)
    TrainConfig(lr=1e-9, min_lr_ratio=0.0, weight_decay=0.0, grad_clip=0.0, betas=[0.0, 0.999])


@pytest.mark.parametrize("launcher, rank", [({}, 0), ({"RANK": "3", "LOCAL_RANK": "1"}, 3),
                                            ({"SLURM_PROCID": "5"}, 5), ({"LOCAL_RANK": "1"}, 1)])
def test_the_process_rank_comes_from_whoever_started_it(env, launcher, rank):
    for key in ("RANK", "SLURM_PROCID"):
        env.delenv(key, raising=False)
    for key, value in launcher.items():
        env.setenv(key, value)
    assert process_rank() == rank


def _fields(cls) -> dict:
    """{field: nested fields or None} of a dataclass, the Recipe's or the schema's."""
    return {f.name: _fields(f.default_factory().__class__)
            if f.default_factory is not dataclasses.MISSING
            and dataclasses.is_dataclass(f.default_factory()) else None
            for f in dataclasses.fields(cls) if f.init}


def test_the_quant_schema_is_the_recipe():
    """``QuantSchema``, generated from ``Recipe`` for OmegaConf (which takes no tuples or
    Literals): the same keys at every level (but ``switch.at``, the removed key it names in a
    refusal) and, composed with nothing set, the default Recipe."""
    schema = _fields(QuantSchema)
    del schema["switch"]["at"]
    assert schema == _fields(Recipe)
    assert recipe_of(OmegaConf.structured(QuantSchema)) == Recipe()
