"""Where ``data=hf`` reads its documents: a hub dataset or local files, through ``datasets``.

``data.name`` is local when it names an existing file, folder or glob, else a hub name:

    local   parquet, jsonl / json or arrow files (a folder: every such file under it, in name
            order), streamed with the ``datasets`` builder their extension names; no network
    hub     ``HuggingFaceFW/fineweb-edu`` with ``data.subset`` (``sample-10BT``): streamed
            online; offline (``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE``) read from the
            cache of ``datasets``, which a download elsewhere fills

A name that neither exists here nor can be fetched is ``DataUnavailable``, one line naming it
and how to prepare offline: download the files where there is a network and pass them.

``Source.batches`` yields the texts in a fixed order, a batch at a time, each with the
stream's position after it (``IterableDataset.state_dict``), so a resume starts at a
checkpoint's position without reading the documents before it.
"""
from __future__ import annotations

import glob
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import DataConfig
from .corpus import DataUnavailable

BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".arrow": "arrow"}
HF_EXTRA = "pip install -c constraints.txt -e '.[hf]'"


class SourceError(ValueError):
    """The dataset is not what ``data=hf`` was told it is (a column, a file's kind)."""


def _datasets():
    try:
        import datasets
    except ImportError:
        raise DataUnavailable(f"data=hf reads datasets with the `datasets` package, which is "
                              f"not installed: {HF_EXTRA}") from None
    datasets.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    return datasets


@dataclass(frozen=True)
class Source:
    """A dataset's documents, as ``data.name``, ``subset``, ``split`` and ``text_column``
    name them."""

    name: str
    subset: str | None
    split: str
    text_column: str
    files: tuple[Path, ...]
    """the local files, in reading order; empty for a hub dataset."""

    @classmethod
    def of(cls, cfg: DataConfig) -> Source:
        name = str(cfg.name)
        return cls(name, cfg.subset, cfg.split, cfg.text_column, _local_files(name))

    @property
    def stem(self) -> str:
        """The shards' name: the hub dataset's (``fineweb-edu``), the file's or the folder's."""
        if not self.files:
            return self.name.rstrip("/").split("/")[-1].lower()
        path = Path(self.name.split("*")[0] or ".").expanduser().resolve()
        return (path.stem if path.is_file() else path.name) or "data"

    def describe(self) -> dict[str, Any]:
        """What the manifest records of the source: a local file's name and size each."""
        out: dict[str, Any] = {"name": self.name, "subset": self.subset, "split": self.split,
                               "text_column": self.text_column}
        if self.files:
            out["files"] = [[str(f), f.stat().st_size] for f in self.files]
        return out

    def open(self, position: dict | None = None):
        """The stream of the text column, at ``position`` (a ``state_dict``) or its start;
        ``SourceError`` if the dataset has no such column or no document."""
        ds = self._load()
        first = next(iter(ds.take(1)), None)
        if first is None:
            raise SourceError(f"data.name={self.name!r} holds no documents")
        if self.text_column not in first:
            raise SourceError(f"data.text_column={self.text_column!r} is not a column of "
                              f"{self.name} (its columns: {', '.join(first)}); set "
                              "data.text_column")
        ds = ds.select_columns([self.text_column])
        if position is not None:
            ds.load_state_dict(position)
        return ds

    def _load(self):
        datasets = _datasets()
        if self.files:
            builder = BUILDERS[self.files[0].suffix]
            return datasets.load_dataset(builder, data_files=[str(f) for f in self.files],
                                         split="train", streaming=True)
        offline = datasets.config.HF_HUB_OFFLINE
        try:
            ds = datasets.load_dataset(self.name, self.subset, split=self.split,
                                       streaming=not offline)
        except (OSError, ValueError) as err:    # offline, not cached, unknown name or subset
            raise DataUnavailable(
                f"data.name={self.name!r} could not be fetched from the Hugging Face hub "
                f"{'(offline) ' if offline else ''}nor read from the cache of `datasets` "
                f"({str(err).splitlines()[0][:160]}); to prepare offline, download its files "
                f"where there is a network (hf download --repo-type dataset {self.name}) and "
                "pass them: data.name=/path/to/files") from None
        return ds if isinstance(ds, datasets.IterableDataset) else ds.to_iterable_dataset()

    def batches(self, ds, size: int) -> Iterator[tuple[list[str], dict]]:
        """(texts, the position after them) of ``size`` documents at a time; a missing text
        reads as an empty document."""
        for batch in ds.iter(batch_size=size):
            yield [t or "" for t in batch[self.text_column]], ds.state_dict()


def _local_files(name: str) -> tuple[Path, ...]:
    """The data files ``name`` names here (a file, a folder, a glob), in name order; () when
    it names nothing here and reads as a hub name."""
    path = Path(name).expanduser()
    if path.is_dir():
        found = sorted(p for p in path.rglob("*") if p.suffix in BUILDERS and p.is_file())
    elif path.is_file():
        found = [path]
    elif glob.has_magic(name):
        found = sorted(Path(p) for p in glob.glob(str(path), recursive=True))
    elif path.suffix in BUILDERS or name.startswith(("/", ".", "~")):
        raise FileNotFoundError(f"data.name={name!r}: no such file or folder; give local "
                                "parquet / jsonl / arrow files or a hub dataset's name")
    else:
        return ()
    kinds = {BUILDERS.get(p.suffix) for p in found}
    if not found or None in kinds or len(kinds) > 1:
        raise SourceError(f"data.name={name!r} matches {len(found)} files of kinds "
                          f"{sorted(p.suffix or '(none)' for p in found)[:4]}; give files of "
                          f"one kind: {', '.join(BUILDERS)}")
    return tuple(found)
