"""llm.c shards of a fixed token count, written as the tokens come: one ``ShardWriter`` a split.

    <stem>_<split>_000000.bin       complete: llm.c's 1024-byte header (magic 20240520,
                                    version 1 for uint16 ids where the vocabulary fits in
                                    65536, else 2 for uint32; the token count), then the tokens
    <stem>_<split>_000003.bin.tmp   the shard being filled: tokens appended after a header
                                    whose count is written when the shard is full

So ``data=shards`` reads them with llm.c's reader (shard_formats.py). A full shard keeps its
temporary name until the manifest that counts it is written (``commit`` renames it), so no
complete-looking shard exists that the manifest does not count. ``resume`` puts a split back
to a checkpoint's ``SplitState``: a counted shard still under its temporary name is renamed,
the open shard is cut to the tokens the checkpoint counted, and a shard begun after the
checkpoint is removed.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .shard_formats import LLMC_DTYPES, LLMC_HEADER_BYTES, LLMC_MAGIC
from .shards import ShardError

TMP = ".tmp"


@dataclass
class SplitState:
    """What a checkpoint counts of one split."""

    shards: int = 0
    """complete shards (the open one not counted)."""
    open_tokens: int = 0
    """tokens of the open shard."""
    documents: int = 0
    tokens: int = 0
    text_bytes: int = 0
    """UTF-8 bytes of the documents' text (end-of-text tokens have none)."""


def llmc_version(vocab_size: int) -> int:
    """1 (uint16 ids) when every id fits in 16 bits, else 2 (uint32)."""
    return 1 if vocab_size <= 2 ** 16 else 2


class ShardWriter:
    """The shards of one split in ``folder``: ``<stem>_<split>_NNNNNN.bin``."""

    def __init__(self, folder: Path, stem: str, split: str, shard_tokens: int,
                 vocab_size: int):
        self.folder, self.prefix, self.shard_tokens = folder, f"{stem}_{split}_", shard_tokens
        self.version = llmc_version(vocab_size)
        self.dtype = LLMC_DTYPES[self.version]
        self.state = SplitState()
        self._full: list[int] = []      # full shards still under their temporary name
        self._file = None

    def path(self, index: int, tmp: bool = False) -> Path:
        return self.folder / f"{self.prefix}{index:06d}.bin{TMP if tmp else ''}"

    @property
    def pending(self) -> bool:
        """Whether a full shard waits for the manifest that counts it."""
        return bool(self._full)

    def add(self, tokens: np.ndarray, documents: int, text_bytes: int) -> None:
        """Append ``documents``' ``tokens``, filling shards in order."""
        s = self.state
        s.documents, s.tokens, s.text_bytes = (s.documents + documents, s.tokens + len(tokens),
                                               s.text_bytes + text_bytes)
        while len(tokens):
            take = min(len(tokens), self.shard_tokens - s.open_tokens)
            self._open().write(tokens[:take].astype(self.dtype, copy=False).tobytes())
            s.open_tokens += take
            tokens = tokens[take:]
            if s.open_tokens == self.shard_tokens:
                self._close_shard()

    def _open(self):
        if self._file is None:
            self._file = open(self.path(self.state.shards, tmp=True), "wb")
            self._file.write(_header(self.version, 0))
        return self._file

    def _close_shard(self) -> None:
        """The open shard is complete: its header gets its count; renamed at ``commit``."""
        f, self._file = self._open(), None
        f.seek(0)
        f.write(_header(self.version, self.state.open_tokens))
        f.close()
        self._full.append(self.state.shards)
        self.state.shards, self.state.open_tokens = self.state.shards + 1, 0

    def finish(self) -> None:
        """The open shard, if it holds tokens, is the split's last: complete it."""
        if self.state.open_tokens:
            self._close_shard()

    def flush(self) -> None:
        """The open shard's tokens on disk, before a manifest counts them."""
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())

    def commit(self) -> None:
        """Give the full shards the manifest now counts their final names."""
        for index in self._full:
            os.replace(self.path(index, tmp=True), self.path(index))
        self._full = []

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def resume(self, state: SplitState) -> None:
        """Put the split's files back to the checkpoint ``state`` and continue after it."""
        self.state = SplitState(**vars(state))
        self._full = [i for i in range(state.shards) if not self.path(i).exists()]
        missing = [str(self.path(i)) for i in self._full if not self.path(i, tmp=True).exists()]
        if missing:
            raise ShardError(f"{missing[0]}: counted by the manifest but gone; prepare again "
                             "into an empty folder")
        self.commit()
        for stale in self.folder.glob(f"{self.prefix}*.bin{TMP}"):
            if int(stale.name[len(self.prefix):].split(".")[0]) > state.shards:
                stale.unlink()
        open_path = self.path(state.shards, tmp=True)
        if state.open_tokens:
            keep = LLMC_HEADER_BYTES + state.open_tokens * self.dtype.itemsize
            if not open_path.exists() or open_path.stat().st_size < keep:
                raise ShardError(f"{open_path}: shorter than the manifest counts; prepare "
                                 "again into an empty folder")
            self._file = open(open_path, "r+b")
            self._file.truncate(keep)
            self._file.seek(keep)
        elif open_path.exists():
            open_path.unlink()


def _header(version: int, n_tokens: int) -> bytes:
    header = np.zeros(256, np.int32)
    header[:3] = LLMC_MAGIC, version, n_tokens
    return header.tobytes()
