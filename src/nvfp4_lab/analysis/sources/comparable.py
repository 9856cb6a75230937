"""Whether runs can be read in one report: one loss unit, or a refusal; and what a reader must
be told when they differ in model or machine class.

A loss is per token of its run's tokenizer (per byte for ``bytes``): two tokenizers, or one
BPE at two vocabulary sizes, give losses in different units, and a gap between them measures
the tokenizers, not the recipes. ``loss_unit`` refuses such runs with a ValueError naming the
values. Runs of different models, or of different machine classes (their float sums differ:
``sweep/machine.py``), can share the axes, but a gap between two of them is not the recipe's
alone: ``caution_md`` says so at the top of the report.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

UNIT_KEYS = {"data.tokenizer": "tokenizer", "data.vocab_size": "vocabulary size"}
CAUTION_KEYS = {"model": "model", "machine_class": "machine class"}


@dataclass(frozen=True)
class Difference:
    """Runs that differ in one key: the key's name and each value with its count of runs."""

    name: str
    counts: dict[str, int]

    def __str__(self) -> str:
        return f"{self.name}: " + ", ".join(f"{value} ({n} run{'s' * (n != 1)})"
                                            for value, n in self.counts.items())


def _text(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def differences(runs: pd.DataFrame, keys: dict[str, str]) -> list[Difference]:
    """The ``keys`` (column -> name) in which the runs hold more than one recorded value."""
    out = []
    for key, name in keys.items():
        values = runs.get(key, pd.Series(dtype=object)).dropna().map(_text)
        if values.nunique() > 1:
            out.append(Difference(name, values.value_counts(sort=False).to_dict()))
    return out


def loss_unit(runs: pd.DataFrame) -> str:
    """What the runs' losses are per: ``nats/byte`` when every run's tokens are bytes, else
    ``nats/token`` (cross entropy per token of the run's tokenizer). A ValueError when the
    runs differ in tokenizer or vocabulary size: their losses share no unit."""
    mixed = differences(runs, UNIT_KEYS)
    if mixed:
        raise ValueError("the runs' losses are in different units, as they differ in "
                         + "; ".join(map(str, mixed)) + ": compare runs of one tokenizer at "
                         "a time")
    tokenizers = set(runs.get("data.tokenizer", pd.Series(dtype=object)).dropna())
    return "nats/byte" if tokenizers == {"bytes"} else "nats/token"


def caution_md(runs: pd.DataFrame) -> str:
    """A report's warning where its runs differ in model or machine class; "" where not."""
    found = differences(runs, CAUTION_KEYS)
    if not found:
        return ""
    return ("**Read with care: these runs differ in " + "; ".join(map(str, found)) + ".** A "
            "gap between runs of two models measures the models as well as the recipes, and "
            "runs of two machine classes sum their floats differently (a seed paired across "
            "them is not the same computation), so a gap between them is not the recipe's "
            "alone.")
