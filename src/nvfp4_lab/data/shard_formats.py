"""The token files other tools write, recognised by their header: one ``ShardFile`` each.

    llmc     llm.c / modded-nanogpt: 256 little-endian int32 words, then the tokens
               [0] 20240520   [1] version: 1 = uint16 tokens (GPT-2), 2 = uint32 (LLaMA-3)
               [2] token count
    nvtk     the lab's own (shards.py): its header says the vocabulary
    nanogpt  nanoGPT's ``train.bin`` / ``val.bin``: uint16 tokens, no header at all; the
             vocabulary is in ``meta.pkl`` beside them, when there is one

A file is read as ``nanogpt`` only when ``data.format=nanogpt`` says so (a headerless file has
nothing to recognise it by); then a file that does carry one of the headers is refused, since
its header would be read as tokens. ``meta.pkl`` is a pickle, and unpickling runs whatever
code the file names: ``read_meta_vocab`` loads it with an unpickler that refuses every class
and function, which a plain dict of str and int (all nanoGPT writes) never needs.

Every check reads the header and the file's size only, never the tokens.
"""
from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import shards
from .shards import ShardError

LLMC_MAGIC = 20240520
LLMC_DTYPES = {1: np.dtype("<u2"), 2: np.dtype("<u4")}
LLMC_HEADER_BYTES = 256 * 4
NANOGPT_DTYPE = np.dtype("<u2")
FORMATS = ("auto", "nanogpt")      # the values of data.format
META_PKL = "meta.pkl"


@dataclass(frozen=True)
class ShardFile:
    """One file of tokens: where they are and what the file says of them."""

    path: Path
    format: str
    """llmc | nvtk | nanogpt."""
    dtype: np.dtype
    offset: int
    """bytes before the first token."""
    n_tokens: int
    vocab: int | None
    """every id is below this, where the file or its metadata says so; else None."""
    text_bytes: int | None = None
    """the UTF-8 bytes the tokens encode (the lab's own shards), else None."""

    def tokens(self) -> np.ndarray:
        """[n_tokens], memory-mapped read-only (nothing is read until it is indexed)."""
        if self.n_tokens == 0:        # np.memmap refuses a zero-length map
            return np.zeros(0, self.dtype)
        return np.memmap(self.path, dtype=self.dtype, mode="r", offset=self.offset,
                         shape=(self.n_tokens,))

    @property
    def id_bound(self) -> int:
        """Every id is below this: the vocabulary where it is known, else the dtype's range."""
        return self.vocab if self.vocab is not None else 2 ** (8 * self.dtype.itemsize)


def open_shard(path: Path, fmt: str = "auto", meta_vocab: int | None = None) -> ShardFile:
    """``path`` as a ``ShardFile``, its header and size checked (``ShardError`` naming the file
    and the fix otherwise). fmt: ``data.format``; meta_vocab: the vocabulary of a ``nanogpt``
    folder's meta.pkl."""
    first = _first_word(path)
    if fmt == "nanogpt":
        return _nanogpt(path, first, meta_vocab)
    if first == LLMC_MAGIC:
        return _llmc(path)
    if first == shards.MAGIC:
        return _nvtk(path)
    seen = "fewer than 4 bytes" if first is None else f"first word {first:#x}"
    raise ShardError(f"{path}: no header this code knows ({seen}; llm.c's is "
                     f"{LLMC_MAGIC}, the lab's {shards.MAGIC:#x}); if these are nanoGPT's "
                     "headerless uint16 files, add data.format=nanogpt")


def _first_word(path: Path) -> int | None:
    """The file's first little-endian 32-bit word, None if it is shorter than that."""
    with open(path, "rb") as f:
        head = f.read(4)
    return int.from_bytes(head, "little") if len(head) == 4 else None


def _llmc(path: Path) -> ShardFile:
    words = np.fromfile(path, "<i4", count=3)
    if len(words) < 3 or path.stat().st_size < LLMC_HEADER_BYTES:
        raise ShardError(f"{path}: shorter than llm.c's 1024-byte header; the file is "
                         "truncated, copy it again")
    version, n_tokens = int(words[1]), int(words[2])
    if version not in LLMC_DTYPES:
        raise ShardError(f"{path}: llm.c shard version {version}, this code reads 1 (uint16) "
                         "and 2 (uint32); write it again with llm.c's write_datafile")
    dtype = LLMC_DTYPES[version]
    _check_size(path, LLMC_HEADER_BYTES, n_tokens, dtype)
    return ShardFile(path, "llmc", dtype, LLMC_HEADER_BYTES, n_tokens, vocab=None)


def _check_size(path: Path, offset: int, n_tokens: int, dtype: np.dtype) -> None:
    want, size = offset + n_tokens * dtype.itemsize, path.stat().st_size
    if size != want:
        state = "truncated" if size < want else "longer than that"
        raise ShardError(f"{path}: {size} bytes, but its header says {n_tokens} tokens of "
                         f"{dtype.itemsize} bytes ({want} bytes): the file is {state}, copy "
                         "or write it again")


def _nvtk(path: Path) -> ShardFile:
    h = shards.read_header(path)          # checks the version, width and size itself
    return ShardFile(path, "nvtk", h.dtype, shards.HEADER_BYTES, h.n_tokens, h.vocab_size,
                     h.text_bytes or None)


def _nanogpt(path: Path, first: int | None, meta_vocab: int | None) -> ShardFile:
    if first in (LLMC_MAGIC, shards.MAGIC):
        kind = "llm.c's" if first == LLMC_MAGIC else "the lab's"
        raise ShardError(f"{path}: carries {kind} header, not nanoGPT's headerless tokens; "
                         "drop data.format=nanogpt (data.format=auto reads it)")
    size = path.stat().st_size
    if size % NANOGPT_DTYPE.itemsize:
        raise ShardError(f"{path}: {size} bytes, an odd count for uint16 tokens: the file is "
                         "truncated or not one of nanoGPT's, copy or write it again")
    return ShardFile(path, "nanogpt", NANOGPT_DTYPE, 0, size // NANOGPT_DTYPE.itemsize,
                     meta_vocab)


class _NoCode(pickle.Unpickler):
    """An unpickler that refuses every global: a class, a function, ``os.system``."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"it names {module}.{name}")


def read_meta_vocab(folder: Path) -> int | None:
    """``vocab_size`` of nanoGPT's ``meta.pkl`` in ``folder`` (None without one), read
    without running any code the pickle names."""
    path = folder / META_PKL
    if not path.is_file():
        return None
    fix = "remove it and give data.vocab_size instead"
    try:
        meta = _NoCode(io.BytesIO(path.read_bytes())).load()
    except (pickle.UnpicklingError, EOFError, ValueError) as err:
        raise ShardError(f"{path}: not read, as it holds more than plain data ({err}); "
                         f"{fix}") from None
    vocab = meta.get("vocab_size") if isinstance(meta, dict) else None
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 1:
        raise ShardError(f"{path}: holds no positive integer vocab_size; {fix}")
    return vocab
