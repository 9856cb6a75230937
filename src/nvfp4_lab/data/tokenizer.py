"""Tokenizers: raw UTF-8 bytes, or a byte-level BPE trained here on the train split.

Both satisfy the ``Tokenizer`` protocol: ``encode``/``decode`` for people and samples,
``encode_batch`` (numpy arrays, what ``prepare`` uses on megabytes of text), the id of the
end-of-text token that separates documents, and a ``fingerprint``: the sha256 of everything
that decides which ids a text becomes. The fingerprint goes into every shard header and
into meta.json, so a shard can never be read with a tokenizer it was not made with.

``ByteTokenizer`` (``bytes``, Lingua's idea): the id of a token is the byte's value, the
vocabulary is exactly 256 (a multiple of 128, so model dims stay aligned) and nothing is
trained. Its end-of-text token is byte 0 (NUL), which text files do not contain; a
document that does contain NUL would read, to the model, as two documents. No dependency,
no training, about one token per character: the test default.

``BPETokenizer`` (``bpe``, the default): Hugging Face ``tokenizers`` BPE with the GPT-2
byte-level pre-tokenizer and decoder, so every string round-trips and no text is ever
unknown, plus the special token ``<|endoftext|>`` (id 0). It is trained on the train split
only, so no validation text leaks into the vocabulary, and saved as ``tokenizer.json``
beside the shards. Training is deterministic for a given text and takes seconds on the
Shakespeare corpus. ``vocab_size`` is the configured size even when a tiny corpus runs out
of merges before reaching it: the model is built for that many ids, ids above the learned
ones are simply never seen. As with GPT-2, a document containing the literal string
``<|endoftext|>`` gets the separator id there.

``BPETokenizer.pretrained`` loads a tokenizer trained elsewhere (``data=hf``): a local
``tokenizer.json``, or a hub name whose ``tokenizer.json`` ``huggingface_hub`` fetches once
into its cache (offline, only the cache is looked at). Its end-of-text token is the configured
one (``data.eot``), and nothing the tokenizer's post-processor would add (a BOS) is added.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Protocol

import numpy as np

from .shards import ShardError

EOT = "<|endoftext|>"


class Tokenizer(Protocol):
    name: str
    """Short tag used in folder names: ``bytes``, ``bpe4096``."""
    vocab_size: int
    """Every id is in [0, vocab_size)."""
    eot_id: int
    """The end-of-text id written before every document."""

    def encode(self, text: str) -> list[int]: ...

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """One int64 array [n_tokens_i] per text."""
        ...

    def decode(self, ids) -> str: ...

    def fingerprint(self) -> str:
        """sha256 hex digest of the tokenizer's definition."""
        ...


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class ByteTokenizer:
    """UTF-8 bytes as ids; vocab 256, end-of-text = byte 0."""

    name = "bytes"
    vocab_size = 256
    eot_id = 0

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [np.frombuffer(t.encode("utf-8"), np.uint8).astype(np.int64) for t in texts]

    def decode(self, ids) -> str:
        # a window cut from a shard can start or end inside a multi-byte character
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    def fingerprint(self) -> str:
        return _sha256("nvfp4-lab bytes tokenizer: utf-8 bytes, vocab 256, eot 0")


class BPETokenizer:
    """Byte-level BPE (``tokenizers``) with ``<|endoftext|>`` as id 0."""

    def __init__(self, tok, vocab_size: int | None = None, eot: str = EOT):
        """tok: a ``tokenizers.Tokenizer``; vocab_size: the size models are built for
        (default: the learned size; must not be smaller); eot: its end-of-text token."""
        learned = tok.get_vocab_size()
        self.vocab_size = learned if vocab_size is None else vocab_size
        if self.vocab_size < learned:
            raise ValueError(f"vocab_size={vocab_size} is smaller than the tokenizer's "
                             f"{learned} learned ids")
        self.eot_id = tok.token_to_id(eot)
        if self.eot_id is None:
            raise ValueError(f"the tokenizer has no {eot} token; set data.eot to its "
                             "end-of-text token")
        self.learned_vocab_size = learned
        self.name = f"bpe{self.vocab_size}"
        self._tok = tok

    @classmethod
    def train(cls, texts: list[str], vocab_size: int) -> BPETokenizer:
        """Learn ``vocab_size`` ids (``<|endoftext|>`` and the 256 bytes included) from
        ``texts``."""
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers, trainers

        tok = HFTokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, special_tokens=[EOT], show_progress=False,
            # all 256 bytes, even those absent from the train split, so nothing is unknown
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(texts, trainer)
        return cls(tok, vocab_size)

    @classmethod
    def load(cls, path: str | Path, vocab_size: int | None = None,
             eot: str = EOT) -> BPETokenizer:
        """Read a ``tokenizer.json`` (``save`` writes one)."""
        from tokenizers import Tokenizer as HFTokenizer

        try:
            tok = HFTokenizer.from_file(str(path))
        except Exception as err:     # the Rust side's parse errors are plain Exceptions
            raise ValueError(f"{path}: not a tokenizer.json the tokenizers library reads "
                             f"({err})") from None
        return cls(tok, vocab_size, eot)

    @classmethod
    def pretrained(cls, spec: str, eot: str = EOT) -> BPETokenizer:
        """The tokenizer ``spec`` names (``tokenizer_file``), ``eot`` its end-of-text."""
        return cls.load(tokenizer_file(spec), eot=eot)

    def save(self, path: str | Path) -> None:
        self._tok.save(str(path))

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        # the Rust side encodes the texts in parallel; no BOS or EOS of a post-processor
        return [np.asarray(e.ids, np.int64)
                for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids) -> str:
        # keep <|endoftext|> visible: a sample spanning two documents should show the seam
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def fingerprint(self) -> str:
        return _sha256(f"{self._tok.to_str()}\nvocab_size={self.vocab_size}")


def tokenizer_file(spec: str) -> Path:
    """The ``tokenizer.json`` ``spec`` names: a file, a folder holding one, or a hub model
    whose file is fetched into, or found in, huggingface_hub's cache. ``FileNotFoundError``
    (one line: what could not be found, and how to do without the hub) otherwise."""
    path = Path(spec).expanduser()
    if path.is_dir():
        path = path / "tokenizer.json"
    if path.is_file():
        return path
    if spec.endswith(".json") or spec.startswith(("/", ".", "~")) or Path(spec).is_dir():
        raise FileNotFoundError(f"data.tokenizer={spec!r}: no such tokenizer.json")
    return _hub_tokenizer(spec)


def _hub_tokenizer(name: str) -> Path:
    """The cached path of hub model ``name``'s ``tokenizer.json``, fetched if need be."""
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(name, "tokenizer.json"))
    except (OSError, ValueError) as err:     # offline, not cached, no such repo or file
        raise FileNotFoundError(
            f"data.tokenizer={name!r}: its tokenizer.json could not be fetched from the "
            f"Hugging Face hub and is not in its cache ({type(err).__name__}); on a machine "
            f"with a network run `hf download {name} tokenizer.json` and pass the file: "
            "data.tokenizer=/path/to/tokenizer.json") from None


def make_tokenizer(kind: str, train_texts: list[str], vocab_size: int) -> Tokenizer:
    """A new tokenizer of ``kind`` (bytes | bpe), trained on ``train_texts`` if it learns."""
    if kind == "bytes":
        return ByteTokenizer()
    if kind == "bpe":
        return BPETokenizer.train(train_texts, vocab_size)
    raise ValueError(f"data.tokenizer={kind!r} is not one of bpe, bytes")


def load_tokenizer(prepared_dir: str | Path, meta: dict) -> Tokenizer:
    """The tokenizer a prepared folder was made with (``meta`` is its meta.json)."""
    info = meta["tokenizer"]
    if info["kind"] == "bytes":
        tok = ByteTokenizer()
    else:
        tok = BPETokenizer.load(Path(prepared_dir) / info["file"], info["vocab_size"])
    if tok.fingerprint() != info["fingerprint"]:
        raise ShardError(f"{prepared_dir}: the tokenizer does not match meta.json's "
                         "fingerprint; prepare the data again")
    return tok
