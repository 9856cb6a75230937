"""``prepare-data data=hf``: a dataset tokenized into llm.c shards in ``data.path``, resumably.

    <path>/<stem>_train_000000.bin ...   training shards of ``data.shard_tokens`` tokens (the
                                         last of a split holds the rest; hf_shards.py)
    <path>/<stem>_val_000000.bin ...     validation shards
    <path>/manifest.json                 the recipe (source, tokenizer and its sha256, shard
                                         size, validation rule, max_tokens) and the progress
                                         (documents consumed, the stream's position, each
                                         split's shards and tokens)

Every document becomes the end-of-text token followed by its own tokens, as prepared.py and
modded-nanogpt join them, and goes whole to one split: validation when the blake2b-64 of its
UTF-8 text, mod 10^6, is below ``data.val_fraction`` * 10^6, a property of the text alone and
so the same in any process and on any resume. Tokens stop at the first document boundary at
or past ``data.max_tokens``.

Batches of documents are read in this process; with ``data.workers`` > 1 a pool of processes
hashes and tokenizes them, their results taken in order, so the shards do not depend on the
worker count. A checkpoint (at each full shard, and every ``CHECKPOINT_SECONDS``) writes the
open shards' tokens, then the manifest, then renames the full shards; a resume reads the
manifest, puts each split back to it and reads on from the stream's position, so no document
is lost or written twice. A folder whose manifest has another recipe is refused, naming each
key that differs. Nothing is written before the source, its text column and the tokenizer
are found.
"""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .config import DataConfig
from .hf_progress import Progress
from .hf_shards import ShardWriter, SplitState, llmc_version
from .hf_source import Source
from .tokenizer import BPETokenizer, tokenizer_file

MANIFEST = "manifest.json"
SPLITS = ("train", "val")
BATCH_DOCUMENTS = 1000
CHECKPOINT_SECONDS = 30.0
HASH_MOD = 1_000_000


class Interrupted(RuntimeError):
    """``stop_after`` documents were read: the run stops as a killed one would."""


@dataclass(frozen=True)
class Recipe:
    """What decides the shards' bytes: a resume must find the same."""

    source: dict[str, Any]
    stem: str
    tokenizer: str
    tokenizer_sha256: str
    vocab_size: int
    eot: str
    eot_id: int
    shard_tokens: int
    shard_format: str
    max_tokens: int | None
    val_rule: str

    @classmethod
    def of(cls, cfg: DataConfig, source: Source, tok_file: Path, tok: BPETokenizer) -> Recipe:
        return cls(source.describe(), source.stem, str(cfg.tokenizer),
                   hashlib.sha256(tok_file.read_bytes()).hexdigest(), tok.vocab_size, cfg.eot,
                   tok.eot_id, cfg.shard_tokens, f"llm.c version {llmc_version(tok.vocab_size)}",
                   cfg.max_tokens, f"blake2b-64 of the UTF-8 text mod {HASH_MOD} < "
                                   f"{val_threshold(cfg.val_fraction)}: val")


@dataclass
class Manifest:
    """``manifest.json``: the recipe and how far it has come."""

    recipe: Recipe
    documents: int = 0
    """documents consumed, in the stream's order, all of them in the splits' counts."""
    position: dict | None = None
    """the stream's ``state_dict`` after those documents."""
    finished: bool = False
    splits: dict[str, SplitState] = field(
        default_factory=lambda: {s: SplitState() for s in SPLITS})

    def write(self, folder: Path) -> None:
        """Replaced in one step: a reader sees the old manifest or the new one."""
        tmp = folder / f".{MANIFEST}.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=1) + "\n")
        os.replace(tmp, folder / MANIFEST)

    @classmethod
    def read(cls, folder: Path) -> Manifest | None:
        path = folder / MANIFEST
        if not path.is_file():
            return None
        d = json.loads(path.read_text())
        return cls(Recipe(**d["recipe"]), d["documents"], d["position"], d["finished"],
                   {s: SplitState(**d["splits"][s]) for s in SPLITS})


def val_threshold(val_fraction: float) -> int:
    return round(val_fraction * HASH_MOD)


def _refuse_other_recipe(folder: Path, old: Manifest | None, recipe: Recipe) -> None:
    if old is None:
        if folder.is_dir() and any(folder.iterdir()):
            raise FileExistsError(f"data.path={str(folder)!r} holds files but no {MANIFEST}: "
                                  "give an empty or new folder for the shards")
        return
    was, now = asdict(old.recipe), asdict(recipe)
    changed = [f"{k}: {was[k]!r} there, {now[k]!r} now" for k in was if was[k] != now[k]]
    if changed:
        raise FileExistsError(f"data.path={str(folder)!r} holds shards of another recipe ("
                              + "; ".join(changed) + "): give another data.path, or the "
                              "settings it was made with")


@dataclass(frozen=True)
class Encoded:
    """A batch of documents, tokenized: end-of-text and its tokens, for each in order."""

    tokens: np.ndarray
    lengths: np.ndarray
    """[documents] tokens of each, its end-of-text included."""
    val: np.ndarray
    """[documents] bool: the document goes to validation."""
    text_bytes: np.ndarray


class Encoder:
    """Texts to ``Encoded``, in this process or in each worker of a pool."""

    def __init__(self, tok_file: Path, eot: str, threshold: int):
        self.tok, self.threshold = BPETokenizer.load(tok_file, eot=eot), threshold

    def __call__(self, texts: list[str]) -> Encoded:
        raw = [t.encode("utf-8") for t in texts]
        val = np.array([int.from_bytes(hashlib.blake2b(b, digest_size=8).digest(), "little")
                        % HASH_MOD < self.threshold for b in raw], bool)
        ids = self.tok.encode_batch(texts)
        eot = np.array([self.tok.eot_id], np.int64)
        tokens = np.concatenate([part for i in ids for part in (eot, i)]) if ids else eot[:0]
        return Encoded(tokens, np.array([len(i) + 1 for i in ids], np.int64), val,
                       np.array([len(b) for b in raw], np.int64))


_WORKER: Encoder | None = None     # the pool worker's own encoder


def _start_worker(tok_file: Path, eot: str, threshold: int) -> None:
    global _WORKER
    _WORKER = Encoder(tok_file, eot, threshold)


def _encode_in_worker(texts: list[str]) -> Encoded:
    assert _WORKER is not None
    return _WORKER(texts)


def _encoded(batches: Iterator[tuple[list[str], dict]], workers: int, args: tuple
             ) -> Iterator[tuple[Encoded, dict]]:
    """Each batch encoded, with its position, in order; ``workers`` > 1: by a pool of
    processes with a few batches in flight each."""
    if workers == 1:
        encode = Encoder(*args)
        yield from ((encode(texts), position) for texts, position in batches)
        return
    ctx = multiprocessing.get_context("spawn")   # no fork of the tokenizer's threads
    with ctx.Pool(workers, initializer=_start_worker, initargs=args) as pool:
        flight: deque = deque()
        for texts, position in batches:
            flight.append((pool.apply_async(_encode_in_worker, (texts,)), position))
            if len(flight) > 2 * workers:
                result, pos = flight.popleft()
                yield result.get(), pos
        while flight:
            result, pos = flight.popleft()
            yield result.get(), pos


def prepare_hf(cfg: DataConfig, stop_after: int | None = None) -> Path:
    """Write or complete the shards of ``cfg`` in ``data.path`` and return it (see the module
    doc). stop_after: raise ``Interrupted`` once this many documents are read, unsaved, as a
    kill would leave them (the resume test)."""
    source, folder = Source.of(cfg), Path(str(cfg.path))
    tok_file = tokenizer_file(str(cfg.tokenizer))
    tok = BPETokenizer.load(tok_file, eot=cfg.eot)
    recipe = Recipe.of(cfg, source, tok_file, tok)
    manifest = Manifest.read(folder)
    _refuse_other_recipe(folder, manifest, recipe)
    manifest = manifest or Manifest(recipe)
    if not manifest.finished:
        stream = source.open(manifest.position)   # its errors before anything is written
    folder.mkdir(parents=True, exist_ok=True)
    writers = {s: ShardWriter(folder, recipe.stem, s, cfg.shard_tokens, tok.vocab_size)
               for s in SPLITS}
    for split, writer in writers.items():
        writer.resume(manifest.splits[split])
    if manifest.finished:
        return folder
    try:
        _run(cfg, manifest, writers, source.batches(stream, BATCH_DOCUMENTS),
             (tok_file, cfg.eot, val_threshold(cfg.val_fraction)), stop_after)
    finally:
        for writer in writers.values():
            writer.close()
    return folder


def _run(cfg: DataConfig, manifest: Manifest, writers: dict[str, ShardWriter],
         batches: Iterator[tuple[list[str], dict]], args: tuple, stop_after: int | None) -> None:
    folder, last = Path(str(cfg.path)), time.monotonic()
    with Progress(cfg.max_tokens, _tokens(writers)) as progress:
        for enc, position in _encoded(batches, cfg.workers, args):
            n = _keep(enc, cfg.max_tokens, _tokens(writers))
            _add(writers, enc, n)
            manifest.documents += n
            manifest.position = position
            progress.update(_tokens(writers))
            if stop_after is not None and manifest.documents >= stop_after:
                raise Interrupted(f"stopped after {manifest.documents} documents")
            if cfg.max_tokens is not None and _tokens(writers) >= cfg.max_tokens:
                break
            if any(w.pending for w in writers.values()) or \
                    time.monotonic() - last > CHECKPOINT_SECONDS:
                _checkpoint(folder, manifest, writers)
                last = time.monotonic()
    for writer in writers.values():
        writer.finish()
    manifest.finished = True
    _checkpoint(folder, manifest, writers)


def _tokens(writers: dict[str, ShardWriter]) -> int:
    return sum(w.state.tokens for w in writers.values())


def _keep(enc: Encoded, max_tokens: int | None, done: int) -> int:
    """How many of the batch's documents to keep: all, or up to the first at or past
    ``max_tokens``."""
    if max_tokens is None:
        return len(enc.lengths)
    reached = np.flatnonzero(done + np.cumsum(enc.lengths) >= max_tokens)
    return int(reached[0]) + 1 if len(reached) else len(enc.lengths)


def _add(writers: dict[str, ShardWriter], enc: Encoded, n: int) -> None:
    """The first ``n`` documents of ``enc``, each to its split, in order."""
    lengths, val, nbytes = enc.lengths[:n], enc.val[:n], enc.text_bytes[:n]
    tokens = enc.tokens[:int(lengths.sum())]
    to_val = np.repeat(val, lengths)
    for split, docs in (("train", ~val), ("val", val)):
        mask = to_val if split == "val" else ~to_val
        writers[split].add(tokens[mask], int(docs.sum()), int(nbytes[docs].sum()))


def _checkpoint(folder: Path, manifest: Manifest, writers: dict[str, ShardWriter]) -> None:
    """The open shards' tokens, then the manifest that counts them, then the full shards'
    names."""
    for split, writer in writers.items():
        writer.flush()
        manifest.splits[split] = SplitState(**vars(writer.state))
    manifest.write(folder)
    for writer in writers.values():
        writer.commit()


def summary(folder: Path) -> str:
    """What was written, and the command that trains on it."""
    m = Manifest.read(folder)
    assert m is not None
    r, (train, val) = m.recipe, (m.splits[s] for s in SPLITS)
    padded = -(-r.vocab_size // 128) * 128
    return (f"{m.documents} documents: train {train.tokens} tokens in {train.shards} shards, "
            f"val {val.tokens} tokens in {val.shards}; train on them with: nvfp4-lab run "
            f"data=shards data.path={folder} data.train='{r.stem}_train_*.bin' "
            f"data.val='{r.stem}_val_*.bin' data.vocab_size={padded}")
