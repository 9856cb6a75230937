"""Data: corpora, tokenizers, token shards, and the Lightning DataModule that reads them.

    config.py      DataConfig, the schema of conf/data/*.yaml
    corpus.py      sources -> named documents; the train/val split by whole documents
    tokenizer.py   raw bytes, or byte-level BPE trained on the train split
    shards.py      token shards with a self-describing header
    prepared.py    documents -> train.bin / val.bin / tokenizer.json / meta.json, once
    shard_formats.py  the token files of llm.c, nanoGPT and the lab, recognised by header
    shard_set.py   a split in one or more files: windows by index, or in order by epoch
    shard_data.py  ShardData: the splits a run reads (data=shards, or a prepared folder)
    datamodule.py  LMDataModule: batches as a pure function of (seed, step, slot); Slots
    hf_source.py   data=hf: a hub dataset or local parquet / jsonl / arrow files, streamed
    hf_shards.py   llm.c shards of a fixed token count, written as the tokens come
    hf_prepare.py  data=hf: documents -> pretrained tokenizer -> shards, resumable, in parallel
    hf_progress.py tokens, tokens per second and time left while it runs

Typical use::

    cfg = DataConfig(source="shakespeare", tokenizer="bpe", vocab_size=4096)
    path = prepare(cfg)          # ~/.cache/nvfp4-lab/data/shakespeare/bpe4096
    dm = LMDataModule(cfg, seq_len=256, batch_size=32, seed=0, val_batches=20)
"""
from ..lazy import by_module, exports

_NAMES = by_module({
    "config": "DataConfig",
    "corpus": "DataUnavailable load_documents split_documents",
    "datamodule": "LMDataModule Slots",
    "hf_prepare": "prepare_hf",
    "prepared": "PreparedData load_prepared prepare prepared_dir",
    "shards": "ShardError read_header read_shard write_shard",
    "shard_data": "ShardData load_shards",
    "shard_formats": "ShardFile open_shard",
    "shard_set": "ShardSet",
    "tokenizer": "BPETokenizer ByteTokenizer Tokenizer load_tokenizer make_tokenizer",
})
__getattr__, __dir__ = exports(__name__, _NAMES)
__all__ = sorted(_NAMES)
