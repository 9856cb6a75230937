"""Shared fixtures of the data tests: the committed tiny corpus, and pydoc prepared once."""
from pathlib import Path

import pytest

from nvfp4_lab.data import DataConfig, prepare

TINY_TEXT = Path(__file__).resolve().parents[2] / "assets" / "tiny_text"


@pytest.fixture
def tiny_text() -> Path:
    """3.4 KB of public-domain text in four files, one of them in a subfolder."""
    return TINY_TEXT


def _pydoc_cfg(cache_dir, tokenizer="bytes", **kw) -> DataConfig:
    return DataConfig(source="pydoc", tokenizer=tokenizer, vocab_size=512,
                      cache_dir=str(cache_dir), **kw)


@pytest.fixture
def pydoc_cfg(tmp_path):
    """pydoc_cfg(tokenizer="bytes", **fields): a pydoc DataConfig caching under tmp_path."""
    return lambda tokenizer="bytes", **kw: _pydoc_cfg(tmp_path, tokenizer, **kw)


@pytest.fixture(scope="session")
def pydoc_dirs(tmp_path_factory) -> dict[str, tuple[DataConfig, Path]]:
    """{"bytes": (cfg, dir), "bpe": (cfg, dir)}: pydoc prepared once per session, read-only."""
    cache = tmp_path_factory.mktemp("pydoc_cache")
    out = {}
    for tok in ("bytes", "bpe"):
        cfg = _pydoc_cfg(cache, tok)
        out[tok] = (cfg, prepare(cfg))
    return out
