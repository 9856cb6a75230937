"""A run directory: what it holds, and the rules that keep finished results safe.

    <run>/
      config.yaml          the resolved config (Hydra writes no .hydra/ record: output_subdir null)
      layer_report.json    which layer got which quantizer (quant.convert's report)
      checkpoints/last.ckpt  the latest checkpoint; ``resume=auto`` continues from it
      checkpoints/branch/    the steps other arms branch from (config/branch.py)
      logs/csv/version_N/  Lightning's CSVLogger, one version per attempt (start or resume)
      logs/tb/version_N/   TensorBoard events
      logs/wandb/          the Weights & Biases run's local files (``logger=wandb``)
      errors/rank<R>.txt   a failed data-parallel rank's status, cause and traceback
      metrics.csv          the attempts merged: step, tokens, train_loss, val_loss, val_bpb, ...
      summary.json         ``Summary``: status (running | done | failed | diverged), losses,
                           tokens, speed, backend, device, machine class, versions, the
                           code (git SHA and the hash of the package's source), config hash

A sweep directory holds one run directory per job, ``<num>_<overrides>/``, numbered in the
order ``sweep_jobs`` expands the sweep (its ``multirun.yaml``).

Rules (docs/architecture.md, Run directories): a directory whose ``summary.json`` says ``done``
is never trained into again; a directory holding a run of a *different* config is refused;
``resume=never`` refuses any directory that already holds a run. The config hash leaves out
the keys that do not change what is computed (``resume``, ``trainer.progress``, ``logger``),
hashes the data-parallel layout as the micro-batches it makes (``_as_slots``: 2 DDP ranks
are one process accumulating 2), and leaves out the keys added since runs were first hashed while
they select nothing (``ADDED``), so that a run started by an older version still
resumes, and still counts as done, after an upgrade.
"""
from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import os
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper  # its expansion, exactly
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

if TYPE_CHECKING:       # pandas loads with the functions that read metrics, not the module
    import pandas as pd

SUMMARY = "summary.json"
CURVE_COLUMNS = ["step", "tokens", "train_loss", "val_loss", "val_bpb", "lr"]   # metrics.csv
VOLATILE = ("resume", "trainer.progress", "logger")   # change nothing a run computes


def sweep_jobs(params: Any, overrides: list[str]) -> list[list[str]]:
    """The override list of each job of a sweep, in Hydra's launch order (job ``num`` is
    ``<num>_*/``): the sweeper's ``params`` (key: values) first, then the command line's
    ``overrides``, a key given in both taking the command line's values, the last key varying
    fastest."""
    parsed = OverridesParser.create().parse_overrides(
        [f"{k}={v}" for k, v in params.items()] + list(overrides))
    return BasicSweeper.split_arguments(parsed, None)[0]


class RunExists(RuntimeError):
    """The output directory already holds a run that must not be overwritten."""


def config_hash(cfg: DictConfig, *, world: int) -> str:
    """The hash of what ``cfg`` computes on ``world`` data-parallel processes."""
    c = _hashed(cfg, world)
    return hashlib.sha256(json.dumps(c, sort_keys=True).encode()).hexdigest()[:16]


def _hashed(cfg: DictConfig, world: int) -> dict[str, Any]:
    """``cfg`` as its hash sees it: the keys that decide what it computes (Hydra's own node,
    which a job's config holds while it is composed, is none of them)."""
    own = OmegaConf.masked_copy(cfg, [str(k) for k in cfg if k != "hydra"]) if "hydra" in cfg \
        else cfg
    c = cast(dict[str, Any], OmegaConf.to_container(own, resolve=True, enum_to_str=True))
    for key in VOLATILE:
        _drop(c, key)
    _as_slots(c, world)
    _as_first_hashed(c)
    return c


def config_changes(old: DictConfig, new: DictConfig, *, world: int) -> list[str]:
    """``key: OLD there, NEW here`` for each hashed key whose value differs, sorted."""
    a, b = _flat(_hashed(old, world)), _flat(_hashed(new, world))
    return [f"{k}: {a.get(k, '(none)')} there, {b.get(k, '(none)')} here"
            for k in sorted(a.keys() | b.keys()) if a.get(k, KeyError) != b.get(k, KeyError)]


def _flat(c: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` as ``{"a.b": 1}``."""
    out: dict[str, Any] = {}
    for k, v in c.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _as_slots(c: dict[str, Any], world: int) -> None:
    """DDP (or one process) on W ranks accumulating A micro-batches computes what one process
    accumulating W * A does (``data.Slots``): hash it as that, so either resumes the other's
    checkpoint."""
    train, trainer = c.get("train") or {}, c.get("trainer") or {}
    if trainer.get("strategy") not in ("auto", "ddp"):
        return
    train["accumulate"] = train.get("accumulate", 1) * world
    trainer.update(devices=1, num_nodes=1, strategy="auto")


# Keys added since runs were first hashed (2026-12-01): each switch, the value at which it
# selects nothing, and the keys it leaves out of the hash while it holds that value (a run
# from before lacks them all), so that such a run still resumes and counts as done.
# tests/unit/train/test_config_hash.py fails on a schema key that is in neither that first
# config nor here.
ADDED: dict[str, tuple[object, tuple[str, ...]]] = {
    "branch_from": (None, ("branch_from",)),                  # trained from step 0
    "train.tokens_per_param": (None, ("train.tokens_per_param",)),   # length set otherwise
    "quant.four_over_six.operands": ([], ("quant.four_over_six",)),
    "quant.row_scaled": ([], ("quant.row_scaled",)),
    "quant.ms_eden": ([], ("quant.ms_eden",)),
    "model.pattern": ("", ("model.pattern", "model.mamba_chunk", "model.mamba_conv",  # a
                           "model.mamba_expand", "model.mamba_groups",             # transformer
                           "model.mamba_head_dim", "model.mamba_state")),
    "data.train": (None, ("data.train",)),          # no shards: a prepared folder
    "data.val": (None, ("data.val",)),
    "data.order": ("random", ("data.order",)),      # windows drawn from (seed, step)
    "data.format": ("auto", ("data.format",)),      # recognised by header
    "data.name": (None, ("data.name", "data.subset", "data.split", "data.text_column",  # no
                         "data.eot", "data.max_tokens", "data.shard_tokens",        # dataset
                         "data.workers")),                                          # to prepare
}


def _as_first_hashed(c: dict[str, Any]) -> None:
    """Leave out the ``ADDED`` keys whose switch is off; ``model.ffn_mult``, an int until
    fractional FFN widths came, hashes an integral value as that int; ``data.cache_dir``, whose
    default was ``${output_root}/data`` until prepared data moved to the user cache (null),
    hashes null as that value (where the data lies changes no token: its fingerprint is in the
    summary)."""
    for switch, (off, keys) in ADDED.items():
        if _get(c, switch, off) in (off, None):
            for key in keys:
                _drop(c, key)
    model = c.get("model") or {}
    if isinstance(model.get("ffn_mult"), float) and model["ffn_mult"].is_integer():
        model["ffn_mult"] = int(model["ffn_mult"])
    data = c.get("data") or {}
    if "cache_dir" in data and data["cache_dir"] is None:
        data["cache_dir"] = f"{c.get('output_root')}/data"


def _drop(c: dict[str, Any], key: str) -> None:
    """Remove ``c["a"]["b"]`` for ``"a.b"``, if there."""
    *parents, leaf = key.split(".")
    _get(c, ".".join(parents), {}).pop(leaf, None)


def _get(c: Any, key: str, default: Any) -> Any:
    """``c["a"]["b"]`` for ``"a.b"`` (``c`` itself for ``""``), or ``default``."""
    for part in filter(None, key.split(".")):
        if not isinstance(c, dict) or part not in c:
            return default
        c = c[part]
    return c


class Status(enum.StrEnum):
    running = "running"
    done = "done"
    failed = "failed"
    diverged = "diverged"


@dataclass(frozen=True, kw_only=True)
class Summary:
    """``summary.json``: written when a run starts (``running``) and again when it ends. The
    fields in the order the sweep's ``sweep_summary.csv`` puts its columns (``COLUMNS``);
    a file written by an older version reads with the fields it lacks at their defaults."""

    status: Status
    quant: str
    arm: str | None = None
    seed: int
    model: str
    steps: int | None = None              # optimizer steps trained, when it ended
    tokens: int | None = None
    final_val_loss: float | None = None
    best_val_loss: float | None = None
    final_val_bpb: float | None = None
    final_train_loss: float | None = None
    wall_seconds: float | None = None
    tokens_per_second: float | None = None
    backend: str | None = None
    device: str | None = None
    error: str | None = None
    max_steps: int
    tokens_per_step: int
    config_hash: str
    git_sha: str | None = None
    machine_class: str | None = None
    versions: dict[str, str] | None = None
    backend_reason: str | None = None
    started: str | None = None
    finished: str | None = None
    branched_from: dict[str, Any] | None = None   # config/branch.py: the parent run, step
    data_fingerprint: str | None = None  # the prepared data's sha256 (its corpus checksum in)
    code_sha256: str | None = None   # ``code_sha256()``: the code, where no git SHA names it

    @classmethod
    def read(cls, run: Path) -> Summary | None:
        path = Path(run) / SUMMARY
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        known = {k: v for k, v in raw.items() if k in FIELDS}
        return cls(**{**known, "status": Status(raw["status"])})

    def record(self) -> dict[str, Any]:
        """The fields as ``summary.json`` holds them (plain values)."""
        return {k: v.value if isinstance(v, Status) else v
                for k, v in dataclasses.asdict(self).items()
                if v is not None or k not in OPTIONAL_KEYS}

    def write(self, run: Path) -> None:
        """Atomically: a reader never sees half a summary."""
        tmp = Path(run) / f"{SUMMARY}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(self.record(), indent=2, default=str) + "\n")
        tmp.replace(Path(run) / SUMMARY)


def status(run: Path) -> Status | None:
    """A run's status from its ``summary.json``'s one field (a summary of any version, the
    oldest included); None where it has none."""
    path = Path(run) / SUMMARY
    return Status(json.loads(path.read_text())["status"]) if path.exists() else None


FIELDS = tuple(f.name for f in dataclasses.fields(Summary))
COLUMNS = ("job", *FIELDS)                    # sweep_summary.csv
OPTIONAL_KEYS = ("branched_from", "data_fingerprint")  # left out of the file when unset


class RankFailed(RuntimeError):
    """A data-parallel run stopped; the message names the first rank that failed and why."""


@dataclass(frozen=True)
class RankError:
    """Why a data-parallel rank stopped: ``errors/rank<R>.txt`` holds its status, its cause
    and the traceback, one file per rank."""

    rank: int
    status: Status
    cause: str

    def __str__(self) -> str:
        return f"rank {self.rank}: {self.cause}"

    def record(self, run: Path, trace: str) -> None:
        """Atomically: a reader never sees half a record."""
        folder = Path(run) / "errors"
        folder.mkdir(exist_ok=True)
        tmp = folder / f"rank{self.rank}.txt.{os.getpid()}.tmp"
        tmp.write_text(f"{self.status.value}\n{self.cause}\n{trace}")
        tmp.replace(folder / f"rank{self.rank}.txt")

    @classmethod
    def first(cls, run: Path, since: float) -> RankError | None:
        """The earliest record written at or after ``since`` (epoch seconds: this attempt's,
        not an earlier one's), or None. A rank that fails first records its cause before it
        exits, and the others fail only once it has exited (their collectives lose it), so
        the earliest record is the root cause."""
        found = [(p.stat().st_mtime, p) for p in (Path(run) / "errors").glob("rank*.txt")
                 if p.stat().st_mtime >= since]
        if not found:
            return None
        path = min(found)[1]
        status, cause = path.read_text().splitlines()[:2]
        return cls(int(path.stem.removeprefix("rank")), Status(status), cause)


class Start(enum.Enum):
    """What a run directory allows: train from step 0, resume from ``last.ckpt``, or
    nothing (it holds this config's finished run)."""
    new = "new"
    resume = "resume"
    done = "done"


def check_can_start(run: Path, cfg: DictConfig, *, world: int,
                    tokens_per_step: int) -> Start:
    """What ``cfg`` (on ``world`` data-parallel processes) may do in ``run``, or raise
    ``RunExists``."""
    old = Summary.read(run)
    ckpt = Path(run) / "checkpoints" / "last.ckpt"
    if old is None and not ckpt.exists():
        return Start.new
    if cfg.resume == "never":
        raise RunExists(f"{run} already holds a run (status {old and old.status.value}); "
                        "choose another hydra.run.dir, or resume=auto to continue it")
    if old is not None and old.tokens_per_step != tokens_per_step and old.status != Status.done:
        raise RunExists(f"{run} was trained with {old.tokens_per_step} tokens per step, these "
                        f"settings give {tokens_per_step} (batch x seq_len x accumulate x "
                        "world size); resume with the original world size, or trade ranks "
                        "for train.accumulate (2 ranks = accumulate 2)")
    if old is not None and old.config_hash != config_hash(cfg, world=world):
        raise RunExists(f"{run} holds a run of a different config "
                        f"({_differences(run, cfg, world, old.config_hash)}); refusing to mix "
                        "them. Choose another hydra.run.dir.")
    if old is not None and old.status == Status.done:
        return Start.done
    if not ckpt.exists():
        return Start.new
    _check_readable(ckpt)
    return Start.resume


MAX_CHANGES = 5   # keys named in a refusal; the rest are counted


def _differences(run: Path, cfg: DictConfig, world: int, old_hash: str) -> str:
    """The keys in which ``cfg`` differs from the run's ``config.yaml``, both values of each;
    the two hashes where that file is missing or the difference lies in the layout alone."""
    path = Path(run) / "config.yaml"
    old = OmegaConf.load(path) if path.is_file() else None
    changes = config_changes(old, cfg, world=world) if isinstance(old, DictConfig) else []
    if not changes:
        return f"hash {old_hash}, this one {config_hash(cfg, world=world)}"
    more = len(changes) - MAX_CHANGES
    return "; ".join(changes[:MAX_CHANGES]) + (f"; and {more} more keys" if more > 0 else "")


def _check_readable(ckpt: Path) -> None:
    """``RunExists`` when ``ckpt`` is no whole checkpoint file (a copy cut short): torch's
    would fail deep in its zip reader; this answer names the file and the choices."""
    try:
        with zipfile.ZipFile(ckpt) as archive:
            archive.infolist()
    except (zipfile.BadZipFile, OSError) as err:
        raise RunExists(f"{ckpt} is not a readable checkpoint ({err}), so resume=auto cannot "
                        "continue from it: restore the file to resume, or delete it to train "
                        "this run again from step 0 (or choose another hydra.run.dir)") from None


def git_sha() -> str | None:
    """The checkout's commit (with ``-dirty``), or None outside a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=here, capture_output=True, text=True, timeout=5).stdout
        return sha + ("-dirty" if dirty.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def code_sha256(roots: tuple[Path, ...] | None = None) -> str:
    """sha256 of the Python sources that ran, by path under their package: this package's and
    the Triton kernels' where installed (``roots``: the package folders). A wheel install has
    no git SHA; this names its code, and an edited checkout's."""
    h = hashlib.sha256()
    for root in roots or _code_roots():
        for path in sorted(root.rglob("*.py")):
            h.update(f"{root.name}/{path.relative_to(root).as_posix()}\0".encode())
            h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def _code_roots() -> tuple[Path, ...]:
    """nvfp4_lab's folder and, if installed, nvfp4_kernels' (found without importing it)."""
    import importlib.util

    kernels = importlib.util.find_spec("nvfp4_kernels")
    origin = kernels and kernels.origin
    return (Path(__file__).resolve().parent, *([Path(origin).parent] if origin else []))


def read_metrics(run: Path, tokens_per_step: int | None = None) -> pd.DataFrame:
    """One row per step: ``metrics.csv`` if present, else the attempts' CSV logs merged (a later
    attempt of a resumed run wins each (step, metric)). Pure: writes nothing.

    tokens_per_step: needed to merge attempts (Lightning's own step column restarts per
    attempt); without it the attempts' logged ``tokens`` give the step order.
    """
    import pandas as pd

    attempts = sorted(Path(run).glob("logs/csv/version_*/metrics.csv"),
                      key=lambda p: int(p.parent.name.split("_")[1]))
    if not attempts:
        path = Path(run) / "metrics.csv"
        return pd.read_csv(path) if path.exists() else pd.DataFrame(columns=CURVE_COLUMNS)
    frames = []
    for i, path in enumerate(attempts):
        try:
            df = pd.read_csv(path)
        except (pd.errors.EmptyDataError, pd.errors.ParserError):
            continue  # an attempt killed before its first flush
        frames.append(df.copy().assign(attempt=i))  # copy: read_csv leaves wide frames
        # (hundreds of layer-statistic columns) fragmented, and every insert would warn
    if not frames:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    df = pd.concat(frames, ignore_index=True).drop(columns=["step", "epoch"], errors="ignore")
    df = df.dropna(subset=["tokens"]).copy()
    per_step = tokens_per_step or int(df["tokens"].min())
    df["step"] = (df["tokens"] / per_step).round().astype(int)
    df = df.sort_values("attempt").groupby("step").last().reset_index().drop(columns="attempt")
    df = df.copy()
    df["tokens"] = df["step"] * per_step
    rest = sorted(c for c in df.columns if c not in CURVE_COLUMNS)
    return df.reindex(columns=CURVE_COLUMNS + rest)


def merge_metrics(run: Path, tokens_per_step: int, prefix: pd.DataFrame | None = None
                  ) -> pd.DataFrame:
    """Merge the attempts' CSV logs into ``metrics.csv``, one row per step.

    A resumed attempt repeats the steps after the last checkpoint: the later attempt wins. The
    step column counts optimizer steps completed (``tokens / tokens_per_step``). ``prefix``:
    the rows a branch took over from its parent (``branch.Branch.prefix``), first.
    """
    import pandas as pd

    df = read_metrics(run, tokens_per_step)
    if prefix is not None:
        both = pd.concat([prefix, df], ignore_index=True)
        df = both.groupby("step", sort=True).last().reset_index().reindex(columns=both.columns)
    if len(df):
        df.to_csv(Path(run) / "metrics.csv", index=False)
    return df
