"""The machine class of each run, and the label of a set of runs' classes.

Two runs of one config and seed give the same bits only on one machine class
(``sweep/machine.py``: architecture, instruction set, vendor, CPU family, written as
"x86_64 AVX512, AMD family 25"), so every table that compares runs names it. Runs since
2026-12-04 record it in ``summary.json`` (``machine_class``). Older runs recorded less
(``device``: "cpu (x86_64, 1 threads)"), and ``machine_classes.csv``, at the root of the results
tree they lie in, assigns their class from the lab's records: one row per pattern of run paths
(relative to that root, read by ``fnmatch``), the class in the same format and the evidence. What
the evidence does not establish is "unknown" in the class, as ``sweep/machine.py`` writes what
``/proc/cpuinfo`` lacks ("x86_64 AVX512, Intel family unknown").
"""
from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatch
from itertools import combinations
from pathlib import Path

import pandas as pd

TABLE = "machine_classes.csv"
COLUMNS = ("pattern", "machine_class", "source")
UNKNOWN = "unknown"
NOT_RECORDED = "not recorded"
_FIELDS = re.compile(r"(\S+) (\S+), (.+) family (\S+)")    # MachineClass.__str__


@dataclass(frozen=True)
class Assignment:
    """One row of the table: the runs ``pattern`` matches ran on ``machine_class``, as
    ``source`` shows."""

    pattern: str
    machine_class: str
    source: str


@dataclass(frozen=True)
class Assignments:
    """A results tree's table: its rows and the folder their patterns are relative to."""

    root: Path
    rows: tuple[Assignment, ...]

    @classmethod
    def read(cls, path: Path) -> Assignments:
        """The table at ``path``; ValueError naming the row where one is not of the form."""
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames != list(COLUMNS):
                raise ValueError(f"{path}: columns {reader.fieldnames}, expected "
                                 f"{', '.join(COLUMNS)}")
            rows = tuple(Assignment(**r) for r in reader)
        for r in rows:
            if _fields(r.machine_class) is None:
                raise ValueError(f"{path}: pattern {r.pattern}: machine_class {r.machine_class!r} "
                                 f"is not of the form 'x86_64 AVX512, AMD family 25'")
        return cls(path.parent, rows)

    @classmethod
    def above(cls, run: Path) -> Assignments | None:
        """The table of the nearest folder above ``run`` that holds one; None if none does."""
        table = next((p / TABLE for p in run.parents if (p / TABLE).is_file()), None)
        return cls.read(table) if table else None

    def row_for(self, run: Path) -> Assignment | None:
        """The row whose pattern matches ``run``; a run matched by two rows is an error."""
        path = run.relative_to(self.root).as_posix()
        found = [r for r in self.rows if fnmatch(path, r.pattern)]
        if len(found) > 1:
            raise ValueError(f"{self.root / TABLE}: {path} matches the rows "
                             f"{', '.join(r.pattern for r in found)}; give each run one row")
        return found[0] if found else None


def whole(machine_class: object) -> bool:
    """A class with all four parts known (not "unknown", not a label of several)."""
    parts = _fields(machine_class)
    return parts is not None and UNKNOWN not in parts


def machine_class(run: Path, recorded: str | None) -> str | None:
    """``run``'s class: the one it recorded where whole, else its row of the table above it,
    else what it recorded (None: nothing)."""
    if whole(recorded):
        return recorded
    run = run.resolve()
    table = Assignments.above(run)
    row = table.row_for(run) if table else None
    return row.machine_class if row else recorded


def label(classes: Iterable[object]) -> str:
    """The class of a set of runs; where they span several, "mixed: " and each with its runs."""
    counts = Counter(c if isinstance(c, str) and c else NOT_RECORDED for c in classes)
    if len(counts) <= 1:
        return next(iter(counts), NOT_RECORDED)
    return "mixed: " + "; ".join(f"{c} ({n} runs)" for c, n in sorted(counts.items()))


def newest(tables: Iterable[pd.DataFrame]) -> str | None:
    """The class of the run that finished last (collect's tables): the lab's current machine,
    which the index prices fresh seeds on, whatever machine draws it."""
    runs = pd.concat([pd.DataFrame(columns=["finished", "machine_class"]), *tables])
    done = runs.dropna(subset=["finished", "machine_class"]).sort_values("finished")
    return None if done.empty else str(done["machine_class"].iloc[-1])


def agreement(labels: Iterable[str]) -> str:
    """Whether sets of runs, by their labels, ran on one class: different where two differ in a
    part both know, one where all are the same whole class, else not known."""
    distinct = set(labels)
    parts = [_fields(x) for x in distinct]
    if any(a and b and any(UNKNOWN not in (x, y) and x != y for x, y in zip(a, b))
           for a, b in combinations(parts, 2)):
        return "different machine classes"
    if len(distinct) == 1 and whole(next(iter(distinct))):
        return "one machine class"
    return "not known whether one class (part of it not recorded)"


def _fields(machine_class: object) -> tuple[str, ...] | None:
    """(arch, isa, vendor, family) of a class; None for anything else."""
    m = _FIELDS.fullmatch(machine_class) if isinstance(machine_class, str) else None
    return m.groups() if m else None
