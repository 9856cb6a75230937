"""Token files of llm.c, nanoGPT and the lab, recognised by header and read back exactly; a
damaged or foreign file, or a meta.pkl that would run code, refused in one line."""
import os
import pickle

import numpy as np
import pytest
from helpers.shard_writers import write_llmc, write_meta_pkl, write_nanogpt

from nvfp4_lab.data.shard_formats import open_shard, read_meta_vocab
from nvfp4_lab.data.shards import ShardError, write_shard


def _one_line_naming(err: pytest.ExceptionInfo, path) -> str:
    text = str(err.value)
    assert "\n" not in text and str(path) in text, text
    return text


@pytest.mark.parametrize("version, dtype, high", [(1, np.uint16, 50257),
                                                 (2, np.uint32, 128256)])
def test_llmc_shards_read_back_exactly(tmp_path, version, dtype, high):
    tokens = np.random.default_rng(version).integers(0, high, 5000)
    path = tmp_path / "fineweb_train_000001.bin"
    write_llmc(path, tokens, version)
    shard = open_shard(path)
    got = shard.tokens()
    assert shard.format == "llmc" and got.dtype == dtype and shard.vocab is None
    assert isinstance(got, np.memmap) and not got.flags.writeable
    np.testing.assert_array_equal(got, tokens)
    assert shard.id_bound == 2 ** (8 * np.dtype(dtype).itemsize)


def test_nanogpt_headerless_bins_read_back_with_their_meta_vocab(tmp_path):
    tokens = np.random.default_rng(0).integers(0, 65, 3001)
    write_nanogpt(tmp_path / "train.bin", tokens)
    write_meta_pkl(tmp_path, 65)
    vocab = read_meta_vocab(tmp_path)
    shard = open_shard(tmp_path / "train.bin", "nanogpt", vocab)
    assert (shard.format, shard.offset, shard.vocab, vocab) == ("nanogpt", 0, 65, 65)
    np.testing.assert_array_equal(shard.tokens(), tokens)
    assert read_meta_vocab(tmp_path / "elsewhere") is None      # no meta.pkl: no bound


def test_the_labs_shards_bring_their_vocabulary_and_bytes(tmp_path):
    tokens = np.arange(700) % 300
    write_shard(tmp_path / "val.bin", tokens, vocab_size=300, eot_id=0, text_bytes=2100)
    shard = open_shard(tmp_path / "val.bin")
    assert (shard.format, shard.vocab, shard.text_bytes) == ("nvtk", 300, 2100)
    np.testing.assert_array_equal(shard.tokens(), tokens)


@pytest.mark.parametrize("cut, says", [(2, "truncated"), (-2, "longer than that")])
def test_a_shard_shorter_or_longer_than_its_header_says_is_refused(tmp_path, cut, says):
    path = tmp_path / "fineweb_val_000000.bin"
    write_llmc(path, np.arange(1000))
    data = path.read_bytes()
    path.write_bytes(data[:-cut] if cut > 0 else data + b"\0\0")
    with pytest.raises(ShardError) as err:
        open_shard(path)
    text = _one_line_naming(err, path)
    assert "says 1000 tokens" in text and says in text and "copy" in text


def test_a_foreign_header_is_refused_with_the_way_to_read_nanogpt_bins(tmp_path):
    path = tmp_path / "train.bin"
    write_nanogpt(path, np.arange(10, 2000))
    with pytest.raises(ShardError) as err:
        open_shard(path)
    assert "no header this code knows" in _one_line_naming(err, path)
    assert "data.format=nanogpt" in str(err.value)


@pytest.mark.parametrize("damage, says", [
    ("version", "llm.c shard version 3"),
    ("nanogpt", "carries llm.c's header"),
    ("odd", "an odd count"),
])
def test_what_the_header_cannot_be_is_refused(tmp_path, damage, says):
    path = tmp_path / "s.bin"
    write_llmc(path, np.arange(100), version=3 if damage == "version" else 1)
    if damage == "odd":
        write_nanogpt(path, np.arange(100))
        path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(ShardError, match=says) as err:
        open_shard(path, "auto" if damage == "version" else "nanogpt")
    _one_line_naming(err, path)


class _Runs:
    """Pickles as a call of os.system: what a hostile meta.pkl holds."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def test_a_meta_pkl_that_would_run_code_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    with open(tmp_path / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": 65, "x": _Runs(f"touch {marker}")}, f)
    with pytest.raises(ShardError) as err:
        read_meta_vocab(tmp_path)
    text = _one_line_naming(err, tmp_path / "meta.pkl")
    assert "system" in text and "data.vocab_size" in text
    assert not marker.exists()


def test_a_meta_pkl_without_a_vocabulary_is_refused(tmp_path):
    with open(tmp_path / "meta.pkl", "wb") as f:
        pickle.dump({"itos": {0: "a"}}, f)
    with pytest.raises(ShardError, match="no positive integer vocab_size"):
        read_meta_vocab(tmp_path)
