"""load_shards: the files two patterns pick under data.path, the model's vocabulary settled
from headers, meta.pkl or data.vocab_size; every mistake one line before any batch."""
import shutil

import numpy as np
import pytest
from helpers.shard_writers import write_llmc, write_meta_pkl, write_nanogpt

from nvfp4_lab.data import DataConfig, LMDataModule
from nvfp4_lab.data.shard_data import check, load_shards
from nvfp4_lab.data.shards import ShardError, write_shard

TRAIN, VAL = "fineweb_train_*.bin", "fineweb_val_*.bin"


def _cfg(path, **kw) -> DataConfig:
    return DataConfig(**{"source": "shards", "path": str(path), "train": TRAIN, "val": VAL,
                         "vocab_size": 50257, **kw})


@pytest.fixture
def fineweb(tmp_path):
    """llm.c GPT-2 shards, as modded-nanogpt downloads them: {name: tokens}."""
    rng = np.random.default_rng(0)
    written = {}
    for name, n in (("fineweb_val_000000.bin", 900), ("fineweb_train_000002.bin", 1200),
                    ("fineweb_train_000001.bin", 700), ("fineweb_train_000003.bin", 500)):
        written[name] = rng.integers(0, 50257, n)
        write_llmc(tmp_path / name, written[name])
    return tmp_path, written


def test_the_patterns_pick_the_splits_in_name_order_and_read_back_exactly(fineweb):
    folder, written = fineweb
    data = load_shards(_cfg(folder))
    names = [f"fineweb_train_00000{i}.bin" for i in (1, 2, 3)]
    assert data.train.names == tuple(str(folder / n) for n in names)
    assert data.val.names == (str(folder / "fineweb_val_000000.bin"),)
    for got, name in zip(data.train.arrays, names):
        np.testing.assert_array_equal(got, written[name])
    assert (data.vocab_size, data.bytes_per_token) == (50257, None)
    assert data.train.limit == 50257           # uint16 ids can exceed it: checked per batch
    assert load_shards(_cfg(folder, vocab_size=65536)).train.limit is None


def test_a_validation_pattern_matching_nothing_names_itself_and_the_fix(fineweb):
    folder, _ = fineweb
    with pytest.raises(ShardError) as err:
        check(_cfg(folder, val="val_*.bin"))
    assert str(err.value) == (f"data.val='val_*.bin' matches no file in {folder}; give the "
                              "pattern of the val shards' names, e.g. "
                              "data.val='fineweb_val_*.bin'")


def test_a_truncated_shard_among_many_is_named_before_any_batch(fineweb):
    folder, _ = fineweb
    bad = folder / "fineweb_train_000002.bin"
    bad.write_bytes(bad.read_bytes()[:-100])
    with pytest.raises(ShardError) as err:
        check(_cfg(folder))
    assert str(err.value).startswith(f"{bad}: ") and "truncated" in str(err.value)


def test_a_file_in_both_splits_is_refused(fineweb):
    folder, _ = fineweb
    with pytest.raises(ShardError, match="matched by data.train='fineweb_\\*' and by"):
        load_shards(_cfg(folder, train="fineweb_*"))


def test_the_vocabulary_comes_from_the_files_where_they_state_it(tmp_path):
    write_shard(tmp_path / "train.bin", np.arange(500) % 300, vocab_size=300, eot_id=0,
                text_bytes=1500)
    write_shard(tmp_path / "val.bin", np.arange(200) % 300, vocab_size=300, eot_id=0,
                text_bytes=800)
    lab = load_shards(_cfg(tmp_path, train="train.bin", val="val.bin", vocab_size=0))
    assert (lab.vocab_size, lab.train.limit, lab.bytes_per_token) == (300, None, 4.0)
    with pytest.raises(ShardError, match="set data.vocab_size=300 or more"):
        load_shards(_cfg(tmp_path, train="train.bin", val="val.bin", vocab_size=256))
    assert load_shards(_cfg(tmp_path, train="train.bin", val="val.bin",
                            vocab_size=512)).vocab_size == 512


def test_llmc_shards_state_no_vocabulary_so_it_must_be_given(fineweb):
    folder, _ = fineweb
    with pytest.raises(ShardError) as err:
        load_shards(_cfg(folder, vocab_size=0))
    assert "(an llm.c shard: GPT-2's is 50257); set data.vocab_size" in str(err.value)


def test_nanogpt_bins_take_meta_pkls_vocabulary(tmp_path):
    tokens = np.random.default_rng(1).integers(0, 65, 2000)
    write_nanogpt(tmp_path / "train.bin", tokens)
    write_nanogpt(tmp_path / "val.bin", tokens[:300])
    kw = {"train": "train.bin", "val": "val.bin", "vocab_size": 0, "format": "nanogpt"}
    with pytest.raises(ShardError, match="no meta.pkl beside it"):
        load_shards(_cfg(tmp_path, **kw))
    write_meta_pkl(tmp_path, 65)
    data = load_shards(_cfg(tmp_path, **kw))
    assert (data.vocab_size, data.train.limit) == (65, None)
    np.testing.assert_array_equal(data.train.arrays[0], tokens)


def test_the_fingerprint_follows_the_files_not_the_folder(fineweb, tmp_path_factory):
    folder, written = fineweb
    moved = tmp_path_factory.mktemp("moved")
    shutil.copytree(folder, moved, dirs_exist_ok=True)
    assert load_shards(_cfg(moved)).fingerprint == load_shards(_cfg(folder)).fingerprint
    write_llmc(moved / "fineweb_train_000003.bin", written["fineweb_train_000003.bin"][:-1])
    assert load_shards(_cfg(moved)).fingerprint != load_shards(_cfg(folder)).fingerprint


def test_an_id_beyond_the_vocabulary_stops_the_batch_that_holds_it(tmp_path):
    write_llmc(tmp_path / "fineweb_train_000000.bin", [7] * 400 + [60000] + [7] * 99)
    write_llmc(tmp_path / "fineweb_val_000000.bin", [7] * 100)
    dm = LMDataModule(_cfg(tmp_path, order="sequential"), seq_len=10, batch_size=8, seed=0,
                      val_batches=1)
    dm.setup("fit")
    dm.batch(0)                                  # windows 0..7: tokens 0..80
    with pytest.raises(ShardError, match="token 400 is id 60000, not below the model's "
                                         "vocabulary 50257"):
        dm.batch(5)                              # windows 40..47: tokens 400..480
