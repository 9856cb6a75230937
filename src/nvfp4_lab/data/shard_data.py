"""What a run reads, whatever wrote it: ``ShardData``, two ``ShardSet`` splits and their facts.

``data=shards`` finds its files by two patterns under ``data.path`` (``data.train``,
``data.val``, sorted by name), opens each by its header (shard_formats.py) and settles the
model's vocabulary once, before any batch:

    data.vocab_size > 0   the model's vocabulary; a file whose header or meta.pkl states a
                          larger one is refused; files that state none (llm.c's, nanoGPT's
                          without meta.pkl) are checked batch by batch, unless their dtype
                          cannot hold an id that large
    data.vocab_size = 0   the largest vocabulary the files state; refused when one states none

Everything is decided from headers and sizes, so ``check`` runs it on the command line before
a run directory exists. A prepared folder (``data=bin`` and the corpora) becomes the same
object with one file per split (``prepared.as_shards``), so one sampler reads both.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .config import DataConfig
from .shard_formats import ShardFile, open_shard, read_meta_vocab
from .shard_set import ShardSet
from .shards import ShardError

SPLITS = ("train", "val")
# what the llm.c versions hold, for the message that asks for data.vocab_size
LLMC_VOCABS = {1: "GPT-2's is 50257", 2: "LLaMA-3's is 128256"}


@dataclass(frozen=True)
class ShardData:
    """The splits a run reads and what it needs to know of them."""

    path: Path
    train: ShardSet
    val: ShardSet
    vocab_size: int
    """the model's vocabulary."""
    bytes_per_token: float | None
    """UTF-8 bytes per token of the val split; None when the files do not say."""
    fingerprint: str
    """same files, same fingerprint, wherever the folder lies."""
    meta: dict


def check(cfg: DataConfig) -> None:
    """What only the machine that reads ``cfg``'s data can answer: its folder exists
    (``DataConfig.check_path``) and, for ``source=shards``, every shard's header agrees with
    its file (``load_shards``: headers and sizes only, quick on any number of shards)."""
    cfg.check_path()
    if cfg.source == "shards":
        load_shards(cfg)


def load_shards(cfg: DataConfig) -> ShardData:
    """The shards of ``cfg`` (``source=shards``), every header checked against its file's
    size: ``ShardError`` (one line naming the file and the fix) otherwise."""
    folder = Path(str(cfg.path))
    if not folder.is_dir():
        raise FileNotFoundError(f"data.path={cfg.path!r} is not a folder")
    meta_vocab = read_meta_vocab(folder) if cfg.format == "nanogpt" else None
    files = {split: [open_shard(p, cfg.format, meta_vocab) for p in _matched(cfg, split)]
             for split in SPLITS}
    both = {f.path for f in files["train"]} & {f.path for f in files["val"]}
    if both:
        raise ShardError(f"{min(both)} is matched by data.train={cfg.train!r} and by "
                         f"data.val={cfg.val!r}; make the patterns disjoint")
    vocab = _vocab(cfg.vocab_size, files["train"] + files["val"])
    sets = {split: _shard_set(fs, vocab) for split, fs in files.items()}
    listing = {split: [[f.path.name, f.format, f.n_tokens] for f in fs]
               for split, fs in files.items()}
    meta = {"source": "shards", "vocab_size": vocab, "files": listing}
    digest = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()
    return ShardData(folder, sets["train"], sets["val"], vocab, _bytes_per_token(files["val"]),
                     digest, meta)


def _matched(cfg: DataConfig, split: str) -> list[Path]:
    """The files ``data.<split>`` matches under ``data.path``, sorted by name."""
    pattern = getattr(cfg, split)
    found = sorted(p for p in Path(str(cfg.path)).glob(pattern) if p.is_file())
    if not found:
        raise ShardError(f"data.{split}={pattern!r} matches no file in {cfg.path}; give the "
                         f"pattern of the {split} shards' names, e.g. "
                         f"data.{split}='fineweb_{split}_*.bin'")
    return found


def _vocab(asked: int, files: list[ShardFile]) -> int:
    """The model's vocabulary: ``data.vocab_size``, or (0) the largest the files state."""
    stated = [f for f in files if f.vocab is not None]
    if asked:
        for f in stated:
            if f.vocab > asked:
                raise ShardError(f"{f.path}: holds ids up to {f.vocab - 1} (vocabulary "
                                 f"{f.vocab}), beyond data.vocab_size={asked}; set "
                                 f"data.vocab_size={f.vocab} or more")
        return asked
    silent = next((f for f in files if f.vocab is None), None)
    if silent is not None:
        raise ShardError(f"data.vocab_size=0 takes the vocabulary from the shards, but "
                         f"{silent.path} does not state one ({_hint(silent)}); set "
                         "data.vocab_size")
    return max(f.vocab for f in stated)


def _hint(f: ShardFile) -> str:
    if f.format == "llmc":
        return "an llm.c shard: " + LLMC_VOCABS[1 if f.dtype.itemsize == 2 else 2]
    return "no meta.pkl beside it"


def _shard_set(files: list[ShardFile], vocab: int) -> ShardSet:
    """The files as one split; its ids checked per batch unless every file bounds them."""
    checked = any(f.id_bound > vocab for f in files)
    return ShardSet(tuple(str(f.path) for f in files), tuple(f.tokens() for f in files),
                    vocab if checked else None)


def _bytes_per_token(files: list[ShardFile]) -> float | None:
    """Text bytes per token over ``files``, when every one of them records its text bytes."""
    tokens = sum(f.n_tokens for f in files)
    if not tokens or any(f.text_bytes is None for f in files):
        return None
    return sum(f.text_bytes for f in files) / tokens
