"""A corpus and a tokenizer for the ``data=hf`` tests, made here, and an llm.c shard reader
written from llm.c's layout without the library's code.

``documents`` are short texts of varied length (an empty one and non-ASCII ones among them);
``write_corpus`` writes them as jsonl, parquet or arrow (the arrow IPC stream ``datasets``
saves); ``train_tokenizer`` a byte-level BPE ``tokenizer.json`` trained on them, with
``<|endoftext|>``; ``read_llmc`` the tokens of a shard: a 256-word int32 header (magic
20240520, version 1 = uint16 / 2 = uint32, count), then the tokens.
"""
from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import numpy as np

WORDS = ("the of and to in a is that for it as was with be by on not he this are or his "
         "from at which naïve café über 東京 — ünïcödé").split()
EOT = "<|endoftext|>"


def documents(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 50))) + f" #{i}"
            for i in range(n)]
    docs[3] = ""
    return docs


def write_corpus(folder: Path, docs: list[str], kind: str, files: int = 2) -> Path:
    """``docs`` in ``files`` files of ``kind`` (jsonl | parquet | arrow) under ``folder``,
    an ``id`` column beside ``text``; returns the folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    cut = len(docs) // files
    for k in range(files):
        part = docs[k * cut:(k + 1) * cut if k < files - 1 else len(docs)]
        table = pa.table({"id": list(range(len(part))), "text": part})
        path = folder / f"part{k}.{kind}"
        if kind == "jsonl":
            path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n"
                                    for i, t in enumerate(part)))
        elif kind == "parquet":
            pq.write_table(table, path)
        else:
            with pa.ipc.new_stream(path, table.schema) as writer:
                writer.write_table(table)
    return folder


def train_tokenizer(path: Path, docs: list[str], vocab_size: int = 300) -> Path:
    """A byte-level BPE ``tokenizer.json`` learnt from ``docs``, as the lab trains its own."""
    from nvfp4_lab.data.tokenizer import BPETokenizer

    BPETokenizer.train(docs, vocab_size).save(path)
    return path


def is_val(text: str, val_fraction: float) -> bool:
    """The documented rule: blake2b-64 of the UTF-8 text, little-endian, mod 10^6, below
    val_fraction * 10^6."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % 1_000_000 < round(val_fraction * 1_000_000)


def read_llmc(path: Path) -> np.ndarray:
    header = np.fromfile(path, np.int32, count=256)
    assert header[0] == 20240520, f"{path}: magic {header[0]}"
    dtype = {1: np.uint16, 2: np.uint32}[int(header[1])]
    tokens = np.fromfile(path, dtype, offset=1024)
    assert len(tokens) == header[2], f"{path}: header says {header[2]}, file holds {len(tokens)}"
    return tokens
