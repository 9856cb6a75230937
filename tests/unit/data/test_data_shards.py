"""Token shards: round trip, dtype choice, and refusal of damaged or foreign files."""
import numpy as np
import pytest

from nvfp4_lab.data.shards import (
    HEADER_BYTES,
    ShardError,
    read_header,
    read_shard,
    token_dtype,
    write_shard,
)


@pytest.mark.parametrize("vocab_size", [256, 4096, 2**16, 2**16 + 1, 200_000])
def test_round_trip(tmp_path, vocab_size):
    rng = np.random.default_rng(vocab_size)
    tokens = rng.integers(0, vocab_size, 10_000)
    path = tmp_path / "s.bin"
    fp = "0123456789abcdef" * 4
    header = write_shard(path, tokens, vocab_size=vocab_size, eot_id=vocab_size - 1,
                         text_bytes=3 * 2**32 + 7, fingerprint=fp)
    got = read_shard(path)
    assert isinstance(got, np.memmap) and not got.flags.writeable
    assert got.dtype == token_dtype(vocab_size)
    assert got.dtype.itemsize == (2 if vocab_size <= 2**16 else 4)
    np.testing.assert_array_equal(got, tokens)
    assert header == read_header(path)
    assert (header.vocab_size, header.eot_id, header.n_tokens) == (vocab_size, vocab_size - 1,
                                                                   tokens.size)
    assert header.text_bytes == 3 * 2**32 + 7  # beyond 32 bits: both words are used
    assert header.fingerprint == fp[:8]
    assert path.stat().st_size == HEADER_BYTES + tokens.size * got.dtype.itemsize


def test_out_of_range_ids_are_refused(tmp_path):
    with pytest.raises(ShardError, match="outside"):
        write_shard(tmp_path / "s.bin", np.array([0, 5, 256]), vocab_size=256, eot_id=0)
    with pytest.raises(ShardError, match="outside"):
        write_shard(tmp_path / "s.bin", np.array([0, -1]), vocab_size=256, eot_id=0)


@pytest.fixture
def shard(tmp_path):
    path = tmp_path / "s.bin"
    write_shard(path, np.arange(1000) % 256, vocab_size=256, eot_id=0)
    return path


def test_truncated_tokens_are_refused(shard):
    data = shard.read_bytes()
    shard.write_bytes(data[:-2])
    with pytest.raises(ShardError, match="truncated"):
        read_shard(shard)


def test_trailing_bytes_are_refused(shard):
    with open(shard, "ab") as f:
        f.write(b"\0\0")
    with pytest.raises(ShardError, match="promises 1000 tokens"):
        read_shard(shard)


def test_truncated_header_is_refused(shard):
    shard.write_bytes(shard.read_bytes()[:HEADER_BYTES - 4])
    with pytest.raises(ShardError, match="shorter than"):
        read_shard(shard)


def test_foreign_file_is_refused(shard):
    # a nanoGPT-style headerless uint16 file of the same size
    (np.arange(HEADER_BYTES // 2 + 1000) % 256).astype(np.uint16).tofile(shard)
    with pytest.raises(ShardError, match="not an nvfp4-lab token shard"):
        read_shard(shard)


@pytest.mark.parametrize("word, value, message", [(1, 99, "version 99"),
                                                  (2, 3, "token width 3")])
def test_corrupted_header_is_refused(shard, word, value, message):
    words = np.fromfile(shard, "<u4")
    words[word] = value
    words.tofile(shard)
    with pytest.raises(ShardError, match=message):
        read_shard(shard)
