"""Read run and sweep directories into tidy pandas tables.

Analysis reads files, never models: a run directory (docs/architecture.md, Run directories) holds
``config.yaml`` (the resolved config), ``summary.json`` (status, final losses, tokens) and
``metrics.csv`` (one row per logged step), or, while a run is still going or was killed hard,
Lightning's per-attempt logs under ``logs/csv/version_*/metrics.csv``. ``collect`` turns any
mix of run dirs, sweep dirs and globs into three tables:

    runs     one row per run: run, label, seed, status, recipe, the swept axes, final and
             best losses, tail_train_loss (the paper's metric: train loss averaged over the
             logged steps of the run's last TAIL of steps), tokens, decay_start (tokens where
             the WSD decay begins), device (the machine, as the run recorded it),
             machine_class (``sweep/machine.py``; for a run that did not record it whole,
             its results tree's ``machine_classes.csv``: ``machines``), data.tokenizer and
             data.vocab_size (what the loss is per: ``comparable``), quant.format, params (a
             transformer's non-embedding parameters, from its config's shape)
    curves   one row per run per logged step: run, label, seed, step, tokens, train_loss,
             val_loss, val_bpb, lr
    layers   per-layer quantization error by depth when the runs logged statistics
             (``train.stats_every``): run, label, seed, step, tokens, layer, block, metric, value

and lists what it skipped (failed and diverged runs, unreadable files) instead of crashing on
a half-written run. A run's *label* names its recipe by what differs between the collected
runs: the ablation's ``arm`` when arms differ, else the quant preset, else the swept keys
themselves (``quant.rht.size=16``); ``axes`` says which keys those are, for legends.
"""
from __future__ import annotations

import glob
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from ...model.config import ModelConfig
from ...quant.operands import LayerMetric
from ...rundir import CURVE_COLUMNS, SUMMARY, Summary, read_metrics
from ...schedule import LRSchedule
from .machines import machine_class

TAIL = 0.1   # the share of a run's last steps whose train loss tail_train_loss averages
# config keys that never distinguish recipes: bookkeeping, logging cadence, hardware
_NOT_AN_AXIS = re.compile(r"^(seed|name|resume|output_root|arms(\..*)?|trainer\..*|data\.cache_dir"
                          r"|train\.(val_every|val_batches|ckpt_every|stats_every|log_every))$")


@dataclass
class Collection:
    """What ``collect`` found; see the module docstring for the columns."""
    runs: pd.DataFrame
    curves: pd.DataFrame
    layers: pd.DataFrame
    skipped: pd.DataFrame  # run, status, reason, label (of a failed or diverged run)
    axes: list[str] = field(default_factory=list)
    root: Path | None = None

    @property
    def labels(self) -> list[str]:
        """Recipe labels in the order of ``runs``: BF16 first, then as the sweep launched them
        (``_launch_order``)."""
        return list(dict.fromkeys(self.runs["label"]))


def _launch_order(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs with every BF16 label first (what the gaps are read against), then each label
    where the sweep first launched it (the job number a job directory's name starts with, as
    a number: "10_" after "2_"; runs outside a sweep in the order found)."""
    job = runs["run"].map(_job_number)
    first = job.groupby(runs["label"]).transform("min")
    bf16 = runs["label"].isin(runs.loc[runs["recipe"] == "bf16", "label"])
    order = pd.DataFrame({"bf16": ~bf16, "first": first, "job": job, "at": range(len(runs))})
    return runs.loc[order.sort_values(["bf16", "first", "job", "at"]).index].reset_index(drop=True)


def _job_number(run: str) -> float:
    """7 for ``7_quant=nvfp4/seed=0`` (the job directory above the seed), else infinity."""
    parts = Path(str(run)).parts
    m = re.match(r"(\d+)_", parts[-2] if len(parts) > 1 else parts[0])
    return int(m[1]) if m else math.inf


def find_runs(paths: list[str | Path]) -> list[Path]:
    """Every run directory (one holding ``summary.json`` or ``config.yaml``) at or under the
    given paths; a path may be a glob. Raises FileNotFoundError for a path that matches nothing."""
    found: dict[Path, None] = {}
    for p in paths:
        matches = [Path(m) for m in sorted(glob.glob(str(p)))] or [Path(p)]
        if not any(m.exists() for m in matches):
            raise FileNotFoundError(f"{p}: no such run or sweep directory")
        for m in matches:
            for marker in sorted([*m.rglob(SUMMARY), *m.rglob("config.yaml")]):
                if "checkpoints" not in marker.parts and "logs" not in marker.parts:
                    found[marker.parent.resolve()] = None
    return list(found)


def find_sweeps(path: str | Path) -> list[Path]:
    """The sweep directories at or under ``path`` (those holding Hydra's ``multirun.yaml`` or
    a ``sweep_summary.csv``); ``path`` itself when there are none (a run dir, a glob...)."""
    p = Path(path)
    if (p / "multirun.yaml").exists() or (p / "sweep_summary.csv").exists():
        return [p]
    found = {m.parent for pattern in ("multirun.yaml", "sweep_summary.csv")
             for m in p.rglob(pattern)} if p.is_dir() else set()
    return sorted(found) or [p]


def flatten(d: dict, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists become tuples (hashable)."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = tuple(v) if isinstance(v, list) else v
    return out


def _read_run(run: Path) -> tuple[Summary | None, dict, pd.DataFrame]:
    """(summary, flat config, metrics) of one run; raises ValueError if unreadable."""
    config = {}
    try:
        summary = Summary.read(run)
        if (run / "config.yaml").exists():
            config = flatten(yaml.safe_load((run / "config.yaml").read_text()) or {})
    except (json.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError, KeyError, TypeError,
            ValueError) as err:
        raise ValueError(f"unreadable run files ({type(err).__name__})") from err
    if summary is None and not config:
        raise ValueError(f"neither {SUMMARY} nor config.yaml")
    try:
        metrics = read_metrics(run, summary and summary.tokens_per_step)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, KeyError) as err:
        raise ValueError(f"unreadable metrics ({type(err).__name__})") from err
    return summary, config, metrics


def tail_train_loss(metrics: pd.DataFrame, max_steps: int | None) -> float:
    """Mean logged train loss over the steps after (1 - TAIL) x max_steps; NaN when the run
    has not logged any of them."""
    if not max_steps or "train_loss" not in metrics:
        return float("nan")
    tail = metrics[(metrics["step"] > (1 - TAIL) * max_steps) & (metrics["step"] <= max_steps)]
    return float(tail["train_loss"].mean()) if tail["train_loss"].notna().any() else float("nan")


_SCHEDULE_KEYS = {"kind": "train.schedule", "warmup": "train.warmup", "decay": "train.decay",
                  "min_lr_ratio": "train.min_lr_ratio"}


def _decay_start(summary: Summary | None, config: dict) -> float:
    """Tokens before the first step the trainer takes below the peak rate (WSD); NaN for
    cosine (it decays throughout). A key the config lacks has ``train``'s default."""
    if summary is None:
        return float("nan")
    recorded = {k: config[key] for k, key in _SCHEDULE_KEYS.items() if key in config}
    start = LRSchedule(summary.max_steps, **recorded).falls_from()
    return float("nan") if start is None else start * summary.tokens_per_step


PRESET_NAMES = ("quant.name", "model.name")  # config keys that name a whole preset


def recipe_axes(configs: pd.DataFrame) -> list[str]:
    """The config keys that tell the collected recipes apart.

    configs: one row per run, one column per flat config key. The ablation's ``arm`` wins when
    it differs; else the preset names that differ, ``quant.name`` and ``model.name``, plus any
    varying key they do not determine (a preset fixes all its fields: the recipe's quant.*, the
    model's width, depth and pattern); else every varying key.
    """
    varying = [c for c in configs.columns if not _NOT_AN_AXIS.match(c)
               and configs[c].astype(str).nunique(dropna=False) > 1]
    if "arm" in varying:
        return ["arm"]
    names = [k for k in PRESET_NAMES if k in varying]
    if names:
        by_preset = [configs.astype(str).groupby(k) for k in names]
        return names + [c for c in varying if c not in names
                        and all((by[c].nunique(dropna=False) > 1).any() for by in by_preset)]
    return varying


def _label(row: pd.Series, axes: list[str]) -> str:
    if not axes:
        return str(row.get("arm") or row.get("quant.name") or row.get("quant") or "run")
    if axes == ["arm"]:  # runs outside the arms (arm: null) are named by their preset
        arm = row.get("arm")
        return arm if isinstance(arm, str) else str(row.get("quant.name"))
    values = [str(row.get(a)) for a in axes]
    if len(axes) == 1:
        return values[0]
    short = [a.split(".")[0] if a in PRESET_NAMES else a.rsplit(".", 1)[-1] for a in axes]
    return ", ".join(f"{a}={v}" for a, v in zip(short, values))


def _params(config: dict) -> int | None:
    """A transformer run's non-embedding parameters (``ModelConfig.non_embedding_params``);
    None for a hybrid or a config without a whole model."""
    shape = {k.split(".", 1)[1]: v for k, v in config.items() if k.startswith("model.")}
    try:
        return ModelConfig(**shape).non_embedding_params()
    except (TypeError, ValueError):
        return None


def _layer_table(run_id: str, metrics: pd.DataFrame) -> pd.DataFrame:
    """Per-layer statistic columns (``blocks.3.mlp.fc1/wgrad/rel_err``) as tidy rows."""
    rows = []
    for col in metrics.columns:
        if (m := LayerMetric.parse(col)) is None:
            continue
        part = metrics[["step", "tokens", col]].dropna(subset=[col])
        rows.append(part.rename(columns={col: "value"}).assign(
            run=run_id, layer=m.layer, block=m.block, metric=m.name))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def collect(paths: list[str | Path]) -> Collection:
    """Load every run under ``paths`` (run dirs, sweep dirs, globs) into tidy tables.

    Failed and diverged runs go to ``skipped`` (with their error), as do runs whose files
    cannot be read; runs still in progress keep their partial curve (status "running").
    """
    dirs = find_runs(paths)
    root = Path(*_common_parts(dirs)) if dirs else None
    rows, curves, layers, skipped = [], [], [], []
    for run in dirs:
        run_id = str(run.relative_to(root)) if root and run != root else run.name
        try:
            summary, config, metrics = _read_run(run)
        except ValueError as err:
            skipped.append({"run": run_id, "status": "unreadable", "reason": str(err)})
            continue
        status = summary.status.value if summary else "running"
        if summary and status in ("failed", "diverged"):
            skipped.append({"run": run_id, "status": status, "reason": summary.error or "",
                            "config": config})
            continue
        rows.append({**config, "run": run_id, "path": str(run), "status": status,
                     "name": config.get("name"),
                     "seed": getattr(summary, "seed", config.get("seed")),
                     "recipe": getattr(summary, "quant", config.get("quant.name")),
                     "decay_start": _decay_start(summary, config), "params": _params(config),
                     "tail_train_loss": tail_train_loss(metrics, summary and summary.max_steps),
                     "machine_class": machine_class(run, summary and summary.machine_class),
                     **{k: getattr(summary, k, None) for k in (
                         "final_val_loss", "best_val_loss", "final_val_bpb", "final_train_loss",
                         "tokens", "steps", "wall_seconds", "tokens_per_second", "backend",
                         "model", "finished", "device")}})
        curves.append(metrics.reindex(columns=CURVE_COLUMNS).assign(run=run_id))
        layers.append(_layer_table(run_id, metrics))
    return _assemble(rows, curves, layers, skipped, root)


def _common_parts(dirs: list[Path]) -> tuple[str, ...]:
    parts = dirs[0].parts
    for d in dirs[1:]:
        n = 0
        while n < min(len(parts), len(d.parts)) and parts[n] == d.parts[n]:
            n += 1
        parts = parts[:n]
    return parts if len(dirs) > 1 else dirs[0].parent.parts


def _assemble(rows, curves, layers, skipped, root) -> Collection:
    configs = [s.pop("config", {}) for s in skipped]
    skipped = pd.DataFrame(skipped, columns=["run", "status", "reason", "label"])
    if not rows:
        empty = pd.DataFrame(columns=["run", "label", "seed", *CURVE_COLUMNS])
        return Collection(pd.DataFrame(columns=["run", "label", "seed", "status"]), empty,
                          pd.DataFrame(), skipped, [], root)
    runs = pd.DataFrame(rows)
    config_cols = [c for c in runs.columns if "." in c or c == "arm"]
    axes = recipe_axes(runs[config_cols])
    runs["label"] = runs.apply(_label, axis=1, args=(axes,))
    skipped["label"] = [_label(pd.Series(c), axes) if c else None for c in configs]
    keep = ["run", "label", "seed", "status", "recipe", *axes, "final_val_loss",
            "best_val_loss", "final_val_bpb", "final_train_loss", "tail_train_loss", "tokens",
            "steps", "decay_start", "device", "params", "wall_seconds", "tokens_per_second",
            "backend", "model", "machine_class", "finished", "data.tokenizer",
            "data.vocab_size", "quant.format", "name", "path"]
    runs = _launch_order(runs.reindex(columns=list(dict.fromkeys(keep))))
    meta = runs[["run", "label", "seed"]]
    curves = pd.concat(curves, ignore_index=True).merge(meta, on="run")
    curves = curves.reindex(columns=["run", "label", "seed", *CURVE_COLUMNS])
    layers = [t for t in layers if len(t)]
    layers = pd.concat(layers, ignore_index=True).merge(meta, on="run") if layers \
        else pd.DataFrame()
    return Collection(runs, curves, layers, skipped, axes, root)
