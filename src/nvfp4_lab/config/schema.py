"""The typed schema behind ``conf/``: what a composed config may contain, checked at compose time.

Hydra composes ``conf/config.yaml`` with the chosen group files and the command-line overrides
onto the dataclasses below, which are registered in Hydra's ConfigStore (the "structured config
schema" pattern, docs/architecture.md, Configuration); ``quant``'s is generated from ``Recipe``
(``schema_of``). OmegaConf then refuses, while composing and before any work is done, a key
that the schema does not have (``quant.rht.sise``) and a value outside a closed set: the
closed sets are Enums built from the tuples that ``quant.recipe`` validates against, so the
message lists the allowed values and the full key:

    Invalid value 'nvfp5', expected one of [bf16, fp8, mxfp4, nvfp4]
        full_key: quant.format

(omegaconf 2.3 rejects ``typing.Literal`` and unions, hence Enums, and ``Any`` for the fields
of several types: a block count or a fraction, a number or null.) The library never sees a
DictConfig: ``recipe_of`` and ``plain`` turn the composed config into the plain dataclasses of
``quant``, ``model``, ``data`` and ``TrainConfig``, whose own checks name the key of anything
the schema cannot express.

An ablation's arms (``conf/ablation/*.yaml``) are named sets of changes, ``arms: {name:
{quant: {...}, train: {...}}}``, one of which ``arm=NAME`` selects: ``apply_arm`` merges it
onto the typed config, so an arm is checked exactly like a command-line override.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from ..configs import register_resolvers
from ..data import DataConfig
from ..formats.spec import E8M0_MODES, ERRORS, SIGN_POLICIES, SR_MODES
from ..model import ModelConfig
from ..quant.operands import GEMMS, GROUPS, OPERANDS
from ..quant.presets import preset
from ..quant.recipe import (
    BACKENDS,
    PASSES,
    RECIPE_FORMATS,
    REMOVED,
    TENSOR_BLOCKS,
    WEIGHT_BLOCKS,
    Recipe,
    Switch,
    from_dict,
    to_dict,
)
from ..schedule import SCHEDULES, LRSchedule

T = TypeVar("T")


class Refused(ValueError):
    """A job that cannot start as configured; nothing of it is written."""


def choices(name: str, values: Iterable[str]) -> Any:
    """A str Enum whose members are named by their values, so YAML writes ``2d``, not ``D2``."""
    return Enum(name, {v: v for v in values}, type=str)


if TYPE_CHECKING:    # to the type checker a closed set is a str, to OmegaConf an Enum
    Schedule: TypeAlias = str
    Resume: TypeAlias = str
    Progress: TypeAlias = str
    WandbMode: TypeAlias = str
    QuantSchema: TypeAlias = Any
else:
    Schedule = choices("Schedule", SCHEDULES)
    Resume = choices("Resume", ("auto", "never"))
    Progress = choices("Progress", ("auto", "rich", "plain", "none"))
    WandbMode = choices("WandbMode", ("online", "offline", "disabled"))

# the recipe keys that take a closed set of values (a list's items, for a list)
CLOSED = {"format": RECIPE_FORMATS, "weight_blocks": WEIGHT_BLOCKS, "act_blocks": TENSOR_BLOCKS,
          "grad_blocks": TENSOR_BLOCKS, "sr_mode": SR_MODES, "mx_scale": E8M0_MODES,
          "backend": BACKENDS, "rht.gemms": GEMMS, "rht.signs": SIGN_POLICIES,
          "four_over_six.error": ERRORS, "switch.passes": PASSES,
          **dict.fromkeys(("sr", "row_scaled", "ms_eden", "quantize",
                           "four_over_six.operands"), (*OPERANDS, *GROUPS))}
PLAIN = {"int": int, "str": str}   # the annotations kept; any other (int | None...) is Any


def schema_of(cls: type, prefix: str = "") -> type:
    """The OmegaConf schema of a recipe dataclass (``Recipe`` and its parts): the same fields
    and defaults, closed sets (``CLOSED``) as Enums, lists for tuples, ``Any`` for a field of
    several types (the recipe's own check names the key), plus the removed keys (``REMOVED``),
    declared so that ``recipe_of`` refuses them naming the fix (OmegaConf would only say "not
    in schema")."""
    specs: list[tuple[str, Any, Any]] = []
    for f in dataclasses.fields(cls):
        key = prefix + f.name
        default = f.default_factory() if callable(f.default_factory) else f.default
        kind = choices(key, CLOSED[key]) if key in CLOSED else None
        if dataclasses.is_dataclass(default):
            nested = schema_of(type(default), key + ".")
            specs.append((f.name, nested, field(default_factory=nested)))
        elif isinstance(default, tuple):
            items = [kind(v) for v in default] if kind else list(default)
            specs.append((f.name, list.__class_getitem__(kind or str),
                          field(default_factory=items.copy)))
        else:
            specs.append((f.name, kind or PLAIN.get(str(f.type), Any),
                          kind(default) if kind else default))
    specs += [(k[len(prefix):], Any, None) for k in REMOVED
              if k.startswith(prefix) and "." not in k[len(prefix):]]
    return dataclasses.make_dataclass(f"{cls.__name__}Schema", specs)


if not TYPE_CHECKING:
    QuantSchema = schema_of(Recipe)


@dataclass
class TrainConfig:
    """Optimisation and run length. Steps are optimizer steps (``tokens_per_step``)."""

    seq_len: int = 128
    batch_size: int = 16            # sequences per device and micro-batch
    accumulate: int = 1
    max_steps: int = 300
    max_tokens: int | None = None   # when set, the run length in tokens (wins over max_steps)
    tokens_per_param: float | None = None   # or in tokens per non-embedding parameter
    tokens_multiplier: float = 1.0  # E03b: train this many times longer
    lr: float = 3e-3
    min_lr_ratio: float = LRSchedule.min_lr_ratio
    schedule: Schedule = Schedule(LRSchedule.kind)
    warmup: float = LRSchedule.warmup
    decay: float = LRSchedule.decay
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    weight_decay: float = 0.1
    eps: float = 1e-8
    grad_clip: float = 1.0
    val_every: int = 50
    val_batches: int = 8
    ckpt_every: int = 50
    stats_every: int = 0            # per-layer quantization statistics every k steps (0: off)
    log_every: int = 10

    def __post_init__(self) -> None:
        for key in ("seq_len", "batch_size", "accumulate", "max_steps", "val_every",
                    "val_batches", "ckpt_every", "log_every"):
            if getattr(self, key) < 1:
                raise ValueError(f"train.{key}={getattr(self, key)} must be >= 1")
        if not 0 <= self.warmup < 1 or not 0 <= self.decay <= 1:
            raise ValueError("train.warmup must be in [0, 1) and train.decay in [0, 1]")
        if self.tokens_multiplier <= 0:
            raise ValueError(f"train.tokens_multiplier={self.tokens_multiplier} must be > 0")
        if self.tokens_per_param is not None and not self.tokens_per_param > 0:
            raise ValueError(f"train.tokens_per_param={self.tokens_per_param} must be > 0")
        if self.tokens_per_param and self.max_tokens:
            raise ValueError(f"train.tokens_per_param={self.tokens_per_param} and train."
                             f"max_tokens={self.max_tokens} both set the run length; set one")
        self._check_optimizer()

    def _check_optimizer(self) -> None:
        """AdamW's settings and the schedule's floor, each within what it means."""
        bad = [f"train.{key}={getattr(self, key)} must be {rule}" for key, ok, rule in (
            ("lr", self.lr > 0, "> 0"), ("eps", self.eps > 0, "> 0"),
            ("min_lr_ratio", 0 <= self.min_lr_ratio <= 1, "in [0, 1]"),
            ("weight_decay", self.weight_decay >= 0, ">= 0"),
            ("grad_clip", self.grad_clip >= 0, ">= 0 (0: no clipping)"),
            ("stats_every", self.stats_every >= 0, ">= 0 (0: off)"),
            ("betas", len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas),
             "two numbers in [0, 1)")) if not ok]
        if bad:
            raise ValueError(bad[0])

    def tokens_per_step(self, world: int) -> int:
        """The tokens of one optimizer step on ``world`` data-parallel processes."""
        return self.batch_size * self.seq_len * self.accumulate * world

    def lr_schedule(self, max_steps: int) -> LRSchedule:
        """The learning-rate schedule of a run of ``max_steps``."""
        return LRSchedule(max_steps, self.schedule, self.warmup, self.decay, self.min_lr_ratio)

    def run_length(self, tokens_per_step: int, params: int = 0) -> int:
        """Optimizer steps of the run: ``max_tokens``, ``tokens_per_param`` times the model's
        non-embedding ``params`` (if either is set) or ``max_steps``; times
        ``tokens_multiplier`` (E03b trains MXFP4 1.25-1.5x longer)."""
        tokens = self.max_tokens or (self.tokens_per_param or 0) * params
        steps = math.ceil(tokens / tokens_per_step) if tokens else self.max_steps
        return max(1, round(steps * self.tokens_multiplier))


@dataclass
class TrainerConfig:
    """What Lightning's Trainer gets: where and how to run, not what to compute."""

    accelerator: str = "cpu"
    devices: Any = 1
    num_nodes: int = 1
    strategy: str = "auto"
    precision: str = "32-true"
    deterministic: bool = False
    progress: Progress = Progress("auto")
    threads: int = 0                # torch.set_num_threads (0: the cores, divided among jobs)

    def __post_init__(self) -> None:
        if self.threads < 0:
            raise ValueError(f"trainer.threads={self.threads} must be >= 0 (0: the cores, "
                             "divided among the jobs running at once)")
        if self.num_nodes < 1:
            raise ValueError(f"trainer.num_nodes={self.num_nodes} must be >= 1")
        if isinstance(self.devices, int) and self.devices < 1:
            raise ValueError(f"trainer.devices={self.devices} must be >= 1, a list of device "
                             "indices, or auto")

    @property
    def gpu(self) -> bool:
        """Whether the run trains on CUDA devices (``accelerator`` gpu or cuda)."""
        return self.accelerator in ("gpu", "cuda")

    def world_size(self) -> int:
        """Data-parallel processes: the launcher's when torchrun or srun started us, else the
        config's."""
        launched = launcher_layout()
        if launched:
            return launched[0] * launched[1]
        devices = self.devices if isinstance(self.devices, int) else 1
        return devices * self.num_nodes

    def layout(self) -> tuple[Any, int]:
        """(devices, num_nodes) for Lightning: under a launcher, ``devices: auto`` and the
        default one node become its processes per node and nodes (Lightning needs their
        product to be the world size, and ``auto`` on a CPU means one)."""
        launched = launcher_layout()
        if not launched:
            return self.devices, self.num_nodes
        per_node, nodes = launched
        return (per_node if self.devices == "auto" else self.devices,
                nodes if self.num_nodes == 1 else self.num_nodes)

    def check_launch(self, multirun: bool) -> None:
        """Refuse, before anything is written, what Lightning would fail on after: DDP workers
        spawned from inside a Hydra multirun job (each re-runs the whole sweep;
        docs/architecture.md, Scaling out), and a process count other than the launcher's."""
        many = self.devices not in (1, "1", [0]) or self.num_nodes > 1
        if multirun and many and not launcher_layout():
            raise Refused(
                f"trainer.devices={self.devices} inside a sweep: Lightning would re-launch the "
                "whole sweep in every worker. Run multi-device jobs one at a time under "
                "`torchrun --nproc_per_node=N --no-python nvfp4-lab run trainer=ddp ...`, or "
                "sweep on SLURM with launcher=submitit (one task per GPU).")
        devices, nodes = self.layout()
        if launcher_layout() and isinstance(devices, int) \
                and devices * nodes != self.world_size():
            raise Refused(
                f"trainer.devices={devices} x trainer.num_nodes={nodes} is not the "
                f"{self.world_size()} processes the launcher started; leave "
                "trainer.devices=auto to take the launcher's count")


@dataclass
class LoggerConfig:
    """Where a run reports besides ``metrics.csv`` and TensorBoard: Weights & Biases when
    ``wandb`` (``logger=wandb``; train/wandb_log.py). Logging changes nothing a run computes:
    the config hash leaves it out."""

    wandb: bool = False
    project: str = "nvfp4-lab"
    entity: str | None = None       # null: the API key's default entity
    mode: WandbMode = WandbMode("online")  # offline: written under logs/wandb, `wandb sync` later


def process_rank() -> int:
    """This process's global rank: torchrun's RANK, srun's SLURM_PROCID, or the LOCAL_RANK
    Lightning gives the workers it starts itself (one node); 0 alone."""
    env = os.environ
    return int(env.get("RANK") or env.get("SLURM_PROCID") or env.get("LOCAL_RANK") or 0)


def launcher_layout() -> tuple[int, int] | None:
    """(processes per node, nodes) when torchrun (LOCAL_WORLD_SIZE, WORLD_SIZE) or srun
    (SLURM_NTASKS, SLURM_NNODES) started this process, else None."""
    env = os.environ
    if "LOCAL_WORLD_SIZE" in env and "WORLD_SIZE" in env:
        per_node = int(env["LOCAL_WORLD_SIZE"])
        return per_node, int(env["WORLD_SIZE"]) // per_node
    if "SLURM_NTASKS" in env and "SLURM_NNODES" in env:
        nodes = int(env["SLURM_NNODES"])
        return int(env["SLURM_NTASKS"]) // nodes, nodes
    return None


@dataclass
class RootConfig:
    seed: int = 0
    name: str = "run"               # names the run or sweep directory
    resume: Resume = Resume("auto")  # auto: continue from checkpoints/last.ckpt; never: refuse
    arm: str | None = None
    arms: dict[str, Any] = field(default_factory=dict)
    branch_from: str | None = None  # the arm whose run this one continues (config/branch.py)
    output_root: str = "outputs"
    model: ModelConfig = field(default_factory=ModelConfig)
    quant: QuantSchema = field(default_factory=QuantSchema)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)


def register() -> None:
    """Put the root schema where ``conf/config.yaml`` names it first in its defaults list;
    it types every group (``model``, ``quant``, ...) below it. The configs' resolvers too."""
    ConfigStore.instance().store(name="config_schema", node=RootConfig)
    register_resolvers()


def apply_arm(cfg: DictConfig) -> DictConfig:
    """Merge the selected ablation arm onto the config. ``preset: NAME`` in an arm starts its
    recipe from that named recipe (keeping ``quant.backend``); the arm's name becomes the
    recipe's name."""
    if cfg.arm is None:
        return cfg
    if cfg.arm not in cfg.arms:
        raise ValueError(f"arm={cfg.arm!r} is not one of {', '.join(cfg.arms) or '(none)'}")
    changes = _container(cfg.arms[cfg.arm])
    base = changes.pop("preset", None)
    if base is not None:   # the recipe is the preset's; where it runs stays as configured
        recipe = {**to_dict(preset(base)), "backend": cfg.quant.backend}
        changes["quant"] = OmegaConf.merge(recipe, changes.get("quant", {}))
    out = cast(DictConfig, OmegaConf.merge(cfg, changes))
    out.quant.name = cfg.arm
    return out


# a recipe key as the recipe's own messages name it: a field followed by ``.`` or ``=``
RECIPE_KEY = re.compile(r"(?<![\w.])((?:" + "|".join(f.name for f in fields(Recipe))
                        + r")(?=[.=]))")


def recipe_of(quant: DictConfig) -> Recipe:
    """The composed ``quant`` node as a validated ``Recipe``; ``Refused`` names the keys of
    anything invalid in full (``quant.rht.size=3``, where the recipe says ``rht.size=3``)."""
    try:
        return from_dict(_recipe_fields(quant))
    except ValueError as err:
        raise Refused(RECIPE_KEY.sub(r"quant.\1", str(err))) from None


def switch_of(quant: DictConfig) -> Switch:
    """The ``quant`` node's switch alone: another arm's, whose recipe its own job builds."""
    return Switch(**_recipe_fields(quant)["switch"])


def _recipe_fields(quant: DictConfig) -> dict[str, Any]:
    d = _container(quant)
    switch = d.get("switch")
    if isinstance(switch, dict) and "at" in switch and switch["at"] is None:
        del switch["at"]    # the schema's placeholder for the removed key, unset
    return d


def plain(node: DictConfig, cls: type[T]) -> T:
    """A composed node as its plain dataclass (running the dataclass's own checks)."""
    return cls(**_container(node))


def _container(node: DictConfig) -> dict[str, Any]:
    return cast(dict[str, Any], OmegaConf.to_container(node, resolve=True, enum_to_str=True)
                or {})
