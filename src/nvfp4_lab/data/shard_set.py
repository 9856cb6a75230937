"""A split held in one or more token files, read as one: which tokens a window is.

A window is ``seq_len + 1`` consecutive tokens of one file (never across two: a file is a
document stream of its own). Windows are named two ways:

    at(index)        index in [0, n_starts): every valid start of every file, file after file.
                     A uniform index is a window drawn in proportion to the files' lengths;
                     with one file the index is the start itself, so the lab's single
                     ``train.bin`` draws exactly what it drew before there were several.
    in_order(k)      the k-th of the non-overlapping windows (starts 0, seq_len, 2 seq_len,
                     ...), file after file; k wraps around, one epoch per lap.

Both return int64 rows [n, seq_len + 1] and read only those rows from the memory maps. Where
the files do not bound their ids below the model's vocabulary (``limit``), each batch is
checked as it is read: a max over a few thousand ids, never a scan of the files.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .shards import ShardError


@dataclass(frozen=True)
class ShardSet:
    """The token arrays of one split, in order, and the names of the files they map."""

    names: tuple[str, ...]
    arrays: tuple[np.ndarray, ...]
    limit: int | None = None
    """ids must be below this and are checked per batch; None: the files guarantee it."""

    @property
    def n_tokens(self) -> int:
        return sum(len(a) for a in self.arrays)

    @cached_property
    def _lengths(self) -> np.ndarray:
        return np.array([len(a) for a in self.arrays], np.int64)

    def n_starts(self, seq_len: int) -> int:
        """How many windows ``at`` can name."""
        return int(self._starts(seq_len).sum())

    def n_windows(self, seq_len: int) -> int:
        """How many non-overlapping windows make one epoch of ``in_order``."""
        return int(self._in_order(seq_len).sum())

    def _starts(self, seq_len: int) -> np.ndarray:
        return np.maximum(self._lengths - seq_len, 0)

    def _in_order(self, seq_len: int) -> np.ndarray:
        return np.maximum((self._lengths - 1) // seq_len, 0)

    def at(self, index: np.ndarray, seq_len: int) -> np.ndarray:
        """The windows of ``index`` (int, [n], each in [0, n_starts)): [n, seq_len + 1]."""
        shard, start = _locate(self._starts(seq_len), np.asarray(index, np.int64))
        return self._rows(shard, start, seq_len)

    def in_order(self, k: np.ndarray, seq_len: int) -> np.ndarray:
        """The ``k``-th windows (int, [n], any k >= 0) of the epochs: [n, seq_len + 1]."""
        counts = self._in_order(seq_len)
        if not counts.sum():
            raise ShardError(f"none of the {len(self.names)} files from {self.names[0]} on "
                             f"holds a window of seq_len + 1 = {seq_len + 1} tokens")
        shard, window = _locate(counts, np.asarray(k, np.int64) % counts.sum())
        return self._rows(shard, window * seq_len, seq_len)

    def _rows(self, shard: np.ndarray, start: np.ndarray, seq_len: int) -> np.ndarray:
        rows = np.empty((len(shard), seq_len + 1), np.int64)
        for r, (i, s) in enumerate(zip(shard.tolist(), start.tolist())):
            rows[r] = self.arrays[i][s:s + seq_len + 1]
        if self.limit is not None and rows.size and rows.max() >= self.limit:
            r, j = np.argwhere(rows >= self.limit)[0]
            raise ShardError(f"{self.names[shard[r]]}: token {start[r] + j} is id {rows[r, j]}, "
                             f"not below the model's vocabulary {self.limit}; set "
                             "data.vocab_size to the tokenizer's vocabulary")
        return rows


def _locate(counts: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(file, position within it) of each ``index`` into the files' ``counts``, laid end to
    end."""
    ends = np.cumsum(counts)
    if index.size and (index.min() < 0 or index.max() >= ends[-1]):
        raise IndexError(f"window index outside [0, {ends[-1]})")
    shard = np.searchsorted(ends, index, side="right")
    return shard, index - (ends[shard] - counts[shard])
