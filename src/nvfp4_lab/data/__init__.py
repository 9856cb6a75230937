"""Data: corpora, tokenizers, token shards, and the Lightning DataModule that reads them.

    config.py      DataConfig, the schema of conf/data/*.yaml
    corpus.py      sources -> named documents; the train/val split by whole documents
    tokenizer.py   raw bytes, or byte-level BPE trained on the train split
    shards.py      token shards with a self-describing header
    prepare.py     documents -> train.bin / val.bin / tokenizer.json / meta.json, once
    datamodule.py  LMDataModule: batches as a pure function of (seed, index, rank)

Typical use::

    cfg = DataConfig(source="shakespeare", tokenizer="bpe", vocab_size=4096)
    path = prepare(cfg)                       # outputs/data/shakespeare/bpe4096
    dm = LMDataModule(cfg, seq_len=256, batch_size=32, seed=0, val_batches=20)
"""
from .config import DataConfig
from .corpus import DataUnavailable, load_documents, split_documents
from .datamodule import LMDataModule
from .prepare import PreparedData, load_prepared, prepare, prepared_dir
from .shards import ShardError, read_header, read_shard, write_shard
from .tokenizer import BPETokenizer, ByteTokenizer, Tokenizer, load_tokenizer, make_tokenizer

__all__ = [
    "BPETokenizer", "ByteTokenizer", "DataConfig", "DataUnavailable", "LMDataModule",
    "PreparedData", "ShardError", "Tokenizer", "load_documents", "load_prepared",
    "load_tokenizer", "make_tokenizer", "prepare", "prepared_dir", "read_header",
    "read_shard", "split_documents", "write_shard",
]
