"""One job, resolved once: a composed config with its arm applied, turned into the typed
objects that the run (``task.train``), the dry run (``sweep.plan.plan_job``) and the
command-line check (``preflight``) all read, so that none of them converts the config or
works out a run's length again. Imports no torch and no Lightning."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from omegaconf import DictConfig

from ..data import DataConfig
from ..model import ModelConfig
from ..quant import Recipe
from ..rundir import config_hash
from . import branch
from .schema import LoggerConfig, TrainConfig, TrainerConfig, apply_arm, plain, recipe_of


@dataclass(frozen=True)
class Job:
    """What one job trains, for how long, and where it reports."""

    arm: str | None
    recipe: Recipe
    model: ModelConfig          # vocab_size 0: the data's tokenizer sets it (``sized_model``)
    data: DataConfig
    train: TrainConfig
    trainer: TrainerConfig
    tokens_per_step: int        # on the launcher's (or the config's) data-parallel processes
    max_steps: int              # the whole run's optimizer steps
    branch_step: int | None     # a branch's first step (it trains the rest), else None
    logger: LoggerConfig
    seed: int
    config_hash: str            # what it computes (``rundir.config_hash``): its runs' identity

    def __post_init__(self) -> None:
        if self.data.source == "hf":
            raise ValueError(f"data=hf prepares shards, it does not train: run `nvfp4-lab "
                             f"prepare-data data=hf ...`, then train on them with data=shards "
                             f"data.path={self.data.path} (docs/data.md)")

    @classmethod
    def resolve(cls, cfg: DictConfig) -> Job:
        """``cfg`` as composed, its ``arm`` not yet applied. ValueError (``Refused``) names
        the key of anything invalid."""
        return cls.of_arm(apply_arm(cfg))

    @classmethod
    def of_arm(cls, cfg: DictConfig) -> Job:
        """``cfg`` with its arm applied (``schema.apply_arm``)."""
        t, tr = plain(cfg.train, TrainConfig), plain(cfg.trainer, TrainerConfig)
        model, recipe = plain(cfg.model, ModelConfig), recipe_of(cfg.quant)
        world = tr.world_size()
        tokens_per_step = t.tokens_per_step(world)
        max_steps = t.run_length(tokens_per_step,
                                 model.non_embedding_params() if t.tokens_per_param else 0)
        return cls(cfg.get("arm"), recipe, model, plain(cfg.data, DataConfig), t, tr,
                   tokens_per_step, max_steps, branch.branch_step(cfg, recipe.switch, max_steps),
                   plain(cfg.logger, LoggerConfig), cfg.seed, config_hash(cfg, world=world))

    @property
    def steps_here(self) -> int:
        """The steps this job trains itself: a branch trains its tail only."""
        return self.max_steps - (self.branch_step or 0)

    def sized_model(self, vocab_size: int | None = None) -> ModelConfig:
        """The model with its vocabulary: ``vocab_size`` (the data module's), else as the
        data module will set it (256 for bytes, the tokenizer's size otherwise)."""
        if self.model.vocab_size:
            return self.model
        guess = 256 if self.data.tokenizer == "bytes" else self.data.vocab_size
        return dataclasses.replace(self.model, vocab_size=vocab_size or guess)
