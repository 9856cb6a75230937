"""Token shards: one flat array of token ids per split, behind a self-describing header.

A shard is what training reads, millions of times, through ``np.memmap``: no parsing, no
copies, and the OS page cache shares it between the ranks of a node. The layout follows
modded-nanogpt's FineWeb shards (a fixed block of 256 words, then the tokens) so that a
shard written elsewhere can be validated before a single batch is drawn from it:

    offset 0     header: 256 little-endian uint32 words (1024 bytes)
                   [0] MAGIC                      b"NVTK", marks the file as ours
                   [1] VERSION                    bumped on any layout change
                   [2] token width in bytes       2 (uint16) or 4 (uint32)
                   [3] vocab_size                 every id is < vocab_size
                   [4] eot_id                     the document separator
                   [5] [6] token count            low and high 32 bits
                   [7] [8] text bytes             UTF-8 bytes the tokens encode, low/high;
                                                  0 if unknown (pre-tokenized data)
                   [9] tokenizer fingerprint      first 8 hex digits of its sha256
                   [10:256] zero                  room for later fields
    offset 1024  tokens: uint16 if vocab_size <= 65536, else uint32

The token count and the text byte count are stored exactly (two words each), so that
bits-per-byte needs no side file: bytes/token = text bytes / tokens. ``read_shard`` refuses a
file whose magic, version or width is wrong, or whose size disagrees with the header (a
truncated copy, an interrupted write, a foreign ``.bin``), with a message naming the file.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = int.from_bytes(b"NVTK", "little")
VERSION = 1
HEADER_WORDS = 256
HEADER_BYTES = HEADER_WORDS * 4
_HEADER_DTYPE = np.dtype("<u4")
_DTYPES = {2: np.dtype("<u2"), 4: np.dtype("<u4")}
# far beyond any tokenizer; keeps every header field a plain 32-bit word
MAX_VOCAB = 2**31


class ShardError(ValueError):
    """A shard (or its meta.json) is not what it claims to be."""


@dataclass(frozen=True)
class ShardHeader:
    """The decoded header of a shard."""

    version: int
    width: int
    vocab_size: int
    eot_id: int
    n_tokens: int
    text_bytes: int
    fingerprint: str

    @property
    def dtype(self) -> np.dtype:
        return _DTYPES[self.width]


def token_dtype(vocab_size: int) -> np.dtype:
    """The narrowest stored dtype that holds ids 0 .. vocab_size - 1."""
    return _DTYPES[2] if vocab_size <= 2**16 else _DTYPES[4]


def _split64(n: int) -> tuple[int, int]:
    return n & 0xFFFFFFFF, n >> 32


def write_shard(path: str | Path, tokens: np.ndarray, *, vocab_size: int, eot_id: int,
                text_bytes: int = 0, fingerprint: str = "00000000") -> ShardHeader:
    """Write ``tokens`` ([n_tokens], any integer dtype) as a shard at ``path``.

    text_bytes: the UTF-8 bytes the tokens encode (0 if unknown); fingerprint: the
    tokenizer's sha256 hex digest (its first 8 digits are kept). Raises ``ShardError`` if an
    id is outside [0, vocab_size) rather than silently wrapping it in the narrow dtype.
    """
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
        raise ShardError(f"tokens must be a 1-D integer array, got {tokens.dtype} "
                         f"{tokens.shape}")
    if not 0 < vocab_size <= MAX_VOCAB or not 0 <= eot_id < vocab_size:
        raise ShardError(f"vocab_size={vocab_size}, eot_id={eot_id} out of range")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ShardError(f"token ids span [{tokens.min()}, {tokens.max()}], outside "
                         f"[0, {vocab_size})")
    dtype = token_dtype(vocab_size)
    header = np.zeros(HEADER_WORDS, _HEADER_DTYPE)
    header[:10] = (MAGIC, VERSION, dtype.itemsize, vocab_size, eot_id,
                   *_split64(tokens.size), *_split64(text_bytes), int(fingerprint[:8], 16))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype(dtype, copy=False).tobytes())
    return read_header(path)


def read_header(path: str | Path) -> ShardHeader:
    """Decode and check the header of the shard at ``path`` against the file's size."""
    path = Path(path)
    size = path.stat().st_size
    if size < HEADER_BYTES:
        raise ShardError(f"{path}: {size} bytes, shorter than the {HEADER_BYTES}-byte shard "
                         "header (truncated, or not a token shard)")
    words = np.fromfile(path, _HEADER_DTYPE, count=HEADER_WORDS)
    if words[0] != MAGIC:
        raise ShardError(f"{path}: not an nvfp4-lab token shard (magic {int(words[0]):#x}, "
                         f"expected {MAGIC:#x})")
    if words[1] != VERSION:
        raise ShardError(f"{path}: shard format version {words[1]}, this code reads "
                         f"{VERSION}; prepare the data again")
    width = int(words[2])
    if width not in _DTYPES:
        raise ShardError(f"{path}: token width {width} bytes, expected 2 or 4")
    n_tokens = int(words[5]) | int(words[6]) << 32
    header = ShardHeader(version=int(words[1]), width=width, vocab_size=int(words[3]),
                         eot_id=int(words[4]), n_tokens=n_tokens,
                         text_bytes=int(words[7]) | int(words[8]) << 32,
                         fingerprint=f"{int(words[9]):08x}")
    expected = HEADER_BYTES + n_tokens * width
    if size != expected:
        raise ShardError(f"{path}: {size} bytes, but the header promises {n_tokens} tokens "
                         f"of {width} bytes ({expected} bytes); the file is truncated or "
                         "was overwritten, prepare the data again")
    return header


def read_shard(path: str | Path) -> np.ndarray:
    """The tokens of the shard at ``path``, memory-mapped read-only: [n_tokens]."""
    header = read_header(path)
    if header.n_tokens == 0:
        # np.memmap refuses a zero-length map
        return np.zeros(0, header.dtype)
    return np.memmap(path, dtype=header.dtype, mode="r", offset=HEADER_BYTES,
                     shape=(header.n_tokens,))
