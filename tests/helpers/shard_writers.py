"""Token files as the other tools write them, written here without the library's code.

``write_llmc`` follows llm.c's ``write_datafile`` (dev/data/data_common.py): a 256-word int32
header (magic 20240520, version, token count) then the tokens, uint16 for version 1 (GPT-2)
and uint32 for version 2 (LLaMA-3). ``write_nanogpt`` is nanoGPT's ``prepare.py``: the bare
uint16 array (``ids.tofile``), and its ``meta.pkl`` a pickled dict.
"""
from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def write_llmc(path: Path, tokens: Sequence[int], version: int = 1) -> None:
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, version, len(tokens)
    toks = np.array(tokens, dtype=np.uint16 if version == 1 else np.uint32)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(toks.tobytes())


def write_nanogpt(path: Path, tokens: Sequence[int]) -> None:
    np.array(tokens, dtype=np.uint16).tofile(path)


def write_meta_pkl(folder: Path, vocab_size: int) -> None:
    chars = [chr(ord("a") + i % 26) + str(i) for i in range(vocab_size)]
    meta = {"vocab_size": vocab_size, "itos": dict(enumerate(chars)),
            "stoi": {c: i for i, c in enumerate(chars)}}
    with open(folder / "meta.pkl", "wb") as f:
        pickle.dump(meta, f)

