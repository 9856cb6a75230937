"""Check a command line's overrides before Hydra starts: one line naming the key, the value and
the fix, and nothing written.

Inside ``@hydra.main`` a mistake surfaces late and loudly. A mistyped key
(``model.d_modle=64``) gets Hydra's advice to append it (``+model.d_modle=64``), which the
model then rejects with a traceback; a value the typed configs refuse (``train.max_steps=-3``)
raises inside the task, after Hydra has created the run directory, and prints a partial stack.
``check`` composes the same config first, through Hydra's compose API, and builds the typed
configs the task will build (``config/schema.py``), so the command can stop with one line
before anything exists on disk. A sweep is checked one value at a time: every value of every
swept key, with the other keys at their first value (at most ``MAX_VALUES`` per key; seeds and
the like need no more), and every arm of an ablation. An option that names no file of its
group (``+tokens_per_step=512``), a group added with ``+`` written without it
(``ablation=rht_size``) and a sweep without ``-m`` get the same one line. All of that runs
without torch or Lightning (lazy.py), so a typo or a bad value answers in well under a
second. Only then is
each job's model built on the meta device and converted (torch), so that a width the recipe's
blocks or RHT size do not divide (Quartet II's 128-point RHT on a 96-wide model), or a
micro-batch whose tokens its Wgrad RHT does not, is a one-line error here, not a failed run.
``HYDRA_FULL_ERROR=1`` skips this module and shows Hydra's own report.
"""
from __future__ import annotations

import difflib
import math
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob, IntervalSweep, Override
from hydra.errors import ConfigCompositionException, OverrideParseException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from ..configs import conf_dir, config_groups
from ..quant import operand_plan, switched_plan, token_chunk
from .job import Job
from .schema import LoggerConfig, register
from .wandb_check import refusal as wandb_refusal

if TYPE_CHECKING:
    from ..quant.recipe import Recipe

MAX_VALUES = 20
_NO_KEY = re.compile(r"Could not override '([^']+)'")
_NO_OPTION = re.compile(r"Could not find '([^']+)/([^']+)'")
_WHOLE_FLOAT = re.compile(r"Value '(\d+)\.0' of type 'float' could not be converted to Integer")


def check(argv: list[str], dry_run: bool = False) -> str | None:
    """None when every job of the command line composes into valid configs, else one line
    naming every refused value ("; " between them). Arms of an ablation that would train the
    very same thing are warned about on stderr. A dry run trains nothing: what only the
    training machine can answer is a note on stderr there, not a refusal, so a GPU sweep can
    be costed on a laptop."""
    overrides = [a for a in argv if not a.startswith("-")]
    multirun = bool({"-m", "--multirun"} & set(argv))
    parsed = _parsed(overrides)
    if isinstance(parsed, str):
        return parsed
    swept = [str(o.input_line) for o in parsed if o.is_sweep_override()]
    register()
    noted: set[str] | None = set() if dry_run else None
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        trials = [_jobs(trial, multirun, swept, noted) for trial in _trials(parsed)]
    problems: list[str | None] = [t for t in trials if isinstance(t, str)]
    if not problems:          # every config is valid: now the models, with torch
        warned: set[str] = set()
        problems = [_fit_problem(cast(list[Job], jobs), warned) for jobs in trials]
    return "; ".join(dict.fromkeys(p for p in problems if p)) or None


def composed(overrides: list[str]) -> DictConfig | str:
    """The one config ``overrides`` compose into, or the one line refusing them: for the
    commands that read a config without training it (``prepare-data``)."""
    if isinstance(problem := _parsed(overrides), str):
        return problem
    register()
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        try:
            return compose("config", overrides=overrides)
        except ConfigCompositionException as err:
            return _explain(err, overrides)


def _parsed(overrides: list[str]) -> list[Override] | str:
    """The parsed overrides, or the one line refusing them: a syntax error, or an option of a
    config group that is no file of it (Hydra fails on a number, ``+tokens_per_step=512``,
    with a traceback)."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except OverrideParseException as err:
        return _first_line(err)
    groups = config_groups()
    for o in parsed:
        options = groups.get(o.key_or_group)
        if options is None or o.is_delete() or isinstance(o.value(), (Glob, IntervalSweep)):
            continue
        for name in _names(o):
            if name is not None and not (isinstance(name, str) and name in options):
                return _no_option(o.key_or_group, name, str(o.input_line))
    return parsed


def _names(o: Override) -> list[object]:
    """The option names a group override selects: each value of a sweep, each item of a
    list, or its one value."""
    if o.is_sweep_override():
        return list(o.sweep_iterator())
    value = o.value()
    return list(value) if isinstance(value, list) else [value]


def _no_option(group: str, name: object, override: str) -> str:
    options = sorted(p.stem for p in (conf_dir() / group).glob("*.yaml"))
    return f"no config {group}/{name} ({override}); the options of {group}: {', '.join(options)}"


def _trials(parsed: list[Override]) -> list[list[str]]:
    """The override lists to compose: the first value of every sweep, then each further value
    of each swept key with the others at their first."""
    def at(o: Override, value: str) -> str:
        return f"{o.get_key_element()}={value}"

    values = [list(o.sweep_string_iterator())[:MAX_VALUES] if o.is_sweep_override() else None
              for o in parsed]
    base = [str(o.input_line) if v is None else at(o, v[0]) for o, v in zip(parsed, values)]
    trials = [base]
    for i, (o, v) in enumerate(zip(parsed, values)):
        for value in (v or [])[1:]:
            trials.append([*base[:i], at(o, value), *base[i + 1:]])
    return trials


def _jobs(trial: list[str], multirun: bool, swept: list[str], noted: set[str] | None
          ) -> list[Job] | str:
    """The jobs of one trial (one per arm of an ablation), or the one line refusing it;
    ``swept``: the command line's sweeps, which need a multirun; ``noted``: a dry run's notes
    (``_ready_here``)."""
    try:
        cfg = compose("config", overrides=trial, return_hydra_config=True)
    except ConfigCompositionException as err:
        return _explain(err, trial)
    if cfg.hydra.launcher.get("n_jobs") == 0:
        return ("hydra.launcher.n_jobs=0 runs no job at once; give how many (-1: one per "
                "core)")
    multirun = multirun or str(cfg.hydra.mode) in ("MULTIRUN", "RunMode.MULTIRUN")
    if swept and not multirun:
        return (f"{swept[0]} is a sweep: add -m to run one job per value, or sweep with an "
                "ablation (+ablation=NAME)")
    here = not str(cfg.hydra.launcher.get("_target_")).endswith(".SlurmLauncher")
    arms = [cfg.arm] if cfg.get("arm") is not None else list(cfg.get("arms") or {}) or [None]
    jobs = []
    for arm in arms:
        try:
            trial_cfg = cfg.copy()
            with open_dict(trial_cfg):
                trial_cfg.arm = arm
            job = Job.resolve(trial_cfg)
            job.trainer.check_launch(multirun)
            if here:
                _ready_here(_check_here(job), noted)
        except (ValueError, TypeError, OmegaConfBaseException, FileNotFoundError) as err:
            return _arm_prefix(arm, arms) + _first_line(err)
        jobs.append(job)
    return jobs


def _ready_here(problems: list[str], noted: set[str] | None) -> None:
    """Refuse the first of ``problems`` (ValueError); in a dry run (``noted`` a set) print
    each on stderr as a note instead, once."""
    if not problems:
        return
    if noted is None:
        raise ValueError(problems[0])
    for line in problems:
        if line not in noted:
            noted.add(line)
            print(f"nvfp4-lab: note: {line} (a run would stop here; the dry run goes on)",
                  file=sys.stderr)


def _check_here(job: Job) -> list[str]:
    """What only the machine that trains can answer, asked when that is this one (any
    launcher but SLURM's): the data folder, W&B for ``logger=wandb``, a CUDA device for a GPU
    accelerator, a torch the compiled backend is checked on. Each refusal, in that order."""
    from ..data.shard_data import check as check_data

    checks: list[Callable[[], None]] = [lambda: check_data(job.data),
                                        lambda: _check_wandb(job.logger)]
    if job.trainer.gpu:
        checks.append(lambda: _check_cuda(job.trainer.accelerator))
    if job.recipe.backend == "compiled":
        checks.append(_check_compiled_torch)
    problems = []
    for check in checks:
        try:
            check()
        except (ValueError, FileNotFoundError) as err:
            problems.append(_first_line(err))
    return problems


def _check_wandb(logger: LoggerConfig) -> None:
    if why := wandb_refusal(logger):
        raise ValueError(why)


def _check_cuda(accelerator: str) -> None:
    import torch

    if not torch.cuda.is_available():
        raise ValueError(f"trainer.accelerator={accelerator}: this machine has no CUDA device "
                         f"(torch {torch.__version__}); use trainer.accelerator=cpu, or "
                         "launcher=submitit to train on a SLURM GPU node")


def _check_compiled_torch() -> None:
    from ..quant.packaged import torch_refusal

    if why := torch_refusal("quant.backend"):
        raise ValueError(why)


def _fit_problem(jobs: list[Job], warned: set[str]) -> str | None:
    """The first job whose recipe cannot quantize its model; warns of arms that repeat."""
    trains: dict[str, str | None] = {}   # what an arm trains -> the first arm that trains it
    for job in jobs:
        try:
            quantized = check_fit(job)
        except (ValueError, TypeError) as err:
            return _arm_prefix(job.arm, jobs) + _first_line(err)
        if len(jobs) > 1:
            _warn_if_repeated(job.arm, (job.model, job.data, job.train,
                                        _effective(job.recipe, quantized)), trains, warned)
    return None


def _arm_prefix(arm: str | None, arms: list[Job]) -> str:
    return f"arm {arm}: " if arm is not None and len(arms) > 1 else ""


def _effective(recipe: Recipe, quantized: list[str]) -> tuple[Recipe, tuple[str, ...]]:
    """A recipe as it acts on one model: its fields, with the name and the rule that picks
    the high-precision layers replaced by the layers it quantizes."""
    no_rule = {"first": 0, "last": 0, "names": []}
    return recipe.replace(name="effective", high_precision=no_rule), tuple(quantized)


def _warn_if_repeated(arm: str | None, what: tuple[object, ...], trains: dict[str, str | None],
                      warned: set[str]) -> None:
    """Warn (once) when ``arm`` trains what an earlier arm does: its runs would repeat that
    arm's bit for bit, e.g. a fraction of blocks kept in BF16 that rounds to the same blocks
    on a small model (components' fewer_bf16_blocks on nano)."""
    key = repr(what)
    first = trains.setdefault(key, arm)
    message = (f"nvfp4-lab: warning: arm {arm} trains exactly what arm {first} does on this "
               f"model (same layers, same numerics), so its runs repeat {first}'s; change "
               f"the arm (e.g. quant.high_precision) if the two should differ")
    if first != arm and message not in warned:
        warned.add(message)
        print(message, file=sys.stderr)


def check_fit(job: Job) -> list[str]:
    """The names of the linear layers the recipe quantizes; ValueError when it cannot quantize
    them (a width that its blocks or RHT size do not divide, a micro-batch that its Wgrad RHT
    does not): the model is built on the meta device (no memory, no time) and converted with
    the reference backend (nothing compiled). The one place the check imports torch, and only
    once every config is valid."""
    import torch

    from ..model import build_model
    from ..quant.backends import Backend
    from ..quant.converter import convert

    with torch.device("meta"):
        net = build_model(job.sized_model())
    quantized = convert(net, job.recipe, backend=Backend()).quantized
    if quantized:
        _check_micro_batch(job)
    return quantized


def _check_micro_batch(job: Job) -> None:
    """The tokens of a micro-batch on each rank (batch_size x seq_len) against the chunks of
    the Wgrad RHT of the plan the job's first step runs (``QuantLinear.check_tokens`` at
    every step, after the run directory exists)."""
    recipe, t = job.recipe, job.train
    plan, switch = operand_plan(recipe), recipe.switch.step(job.max_steps)
    if switch is not None and switch <= (job.branch_step or 0):
        plan = switched_plan(plan, recipe.switch.off)
    chunk, tokens = token_chunk(plan), t.batch_size * t.seq_len
    if tokens % chunk:
        per = chunk // math.gcd(t.seq_len, chunk)   # batch_size must be a multiple of this
        raise ValueError(
            f"train.batch_size={t.batch_size} x train.seq_len={t.seq_len} = {tokens} tokens a "
            f"micro-batch, not a multiple of quant.rht.size={chunk} (the Hadamard transform on "
            f"Wgrad works on whole chunks of {chunk} tokens); use train.batch_size="
            f"{-(-t.batch_size // per) * per}, or a train.seq_len or quant.rht.size that makes "
            f"the product a multiple")


def _explain(err: ConfigCompositionException, trial: list[str]) -> str:
    text = str(err)
    if (m := _NO_KEY.search(text)) and m[1] in config_groups():
        override = next((o for o in trial if o.split("=", 1)[0] == m[1]), f"{m[1]}=NAME")
        return (f"{override}: the group {m[1]} is not in the defaults, so it is added with a "
                f"+: write +{override}")
    if m := _NO_KEY.search(text):
        return _no_key(m[1], trial)
    if m := _NO_OPTION.search(text):
        return _no_option(m[1], m[2], f"{m[1]}={m[2]}")
    cause = err.__cause__ or err
    # the override whose key the message names; the longest (``trainer.progress``, not
    # ``trainer``, whose name is in it too)
    named = [o for o in trial if o.split("=", 1)[0].lstrip("+~") in text]
    culprit = max(named, key=lambda o: len(o.split("=", 1)[0]), default=None)
    line = _first_line(cause)
    if m := _WHOLE_FLOAT.search(line):     # 2e9 reads as a float; an int key wants its digits
        line += f": write it as a whole number, {m[1]}"
    return (f"{culprit}: " if culprit else "") + line


def _no_key(key: str, trial: list[str]) -> str:
    """``model.d_modle``: the nearest key of ``model`` and the keys it has."""
    override = next(o for o in trial if o.split("=", 1)[0].lstrip("+~") == key)
    rest = [o for o in trial if o != override]
    cfg = compose("config", overrides=rest)
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if not isinstance(node, DictConfig):
        return f"no key {key} ({override}): {parent} has no keys"
    keys = [str(k) for k in node.keys()]
    near = difflib.get_close_matches(leaf, keys, n=1)
    where = parent or "the top level"
    hint = f"did you mean {parent + '.' if parent else ''}{near[0]}? " if near else ""
    return f"no key {key} ({override}); {hint}{where} has: {', '.join(keys)}"


def _first_line(err: BaseException) -> str:
    return next((line.strip() for line in str(err).splitlines() if line.strip()), repr(err))
