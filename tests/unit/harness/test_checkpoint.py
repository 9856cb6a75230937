"""A run trained on shards that ``prepare-data`` wrote is scored with the tokenizer their
manifest names, if it is the file recorded there; shards written elsewhere name none. The
corpus and the tokenizer.json are made here, and nothing reaches a network."""
import os

os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")

import pytest  # noqa: E402
from helpers.hf_inputs import EOT, documents, train_tokenizer, write_corpus  # noqa: E402
from helpers.shard_writers import write_llmc  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

from nvfp4_lab.data import DataConfig, hf_prepare  # noqa: E402
from nvfp4_lab.harness.checkpoint import EvalRefused, run_tokenizer  # noqa: E402

TEXT = "the naïve café of 東京 was not his"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """(the shards' folder, the tokenizer.json they were written with)."""
    root = tmp_path_factory.mktemp("prepared")
    docs = documents(300)
    tok = train_tokenizer(root / "tokenizer.json", docs)
    hf_prepare.prepare_hf(DataConfig(source="hf", name=str(write_corpus(
        root / "jsonl", docs, "jsonl")), tokenizer=str(tok), path=str(root / "shards"),
        val_fraction=0.1))
    return root / "shards", tok


def shards(path) -> DataConfig:
    return DataConfig(source="shards", path=str(path), vocab_size=512, train="*train*.bin",
                      val="*val*.bin")


def test_the_manifests_tokenizer_encodes_as_its_file_does(prepared, tmp_path):
    folder, tok = prepared
    expected = Tokenizer.from_file(str(tok))
    got = run_tokenizer(tmp_path / "run", shards(folder))
    assert got.encode(TEXT) == expected.encode(TEXT, add_special_tokens=False).ids
    assert got.eot_id == expected.token_to_id(EOT)


def test_another_file_at_the_recorded_path_is_refused(prepared, tmp_path):
    folder, tok = prepared
    copy = tmp_path / "shards"
    copy.mkdir()
    for f in folder.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    other = tmp_path / "tokenizer.json"
    train_tokenizer(other, documents(100, seed=1), vocab_size=280)
    manifest = hf_prepare.Manifest.read(copy)
    hf_prepare.Manifest(hf_prepare.Recipe(**{**vars(manifest.recipe),
                                            "tokenizer": str(other)})).write(copy)
    with pytest.raises(EvalRefused, match=f"{other} is not the tokenizer its shards were "
                                          "written with"):
        run_tokenizer(tmp_path / "run", shards(copy))


def test_shards_written_elsewhere_name_no_tokenizer(tmp_path):
    write_llmc(tmp_path / "fineweb_train_000000.bin", range(100))
    write_llmc(tmp_path / "fineweb_val_000000.bin", range(50))
    with pytest.raises(EvalRefused, match=f"{tmp_path} holds no manifest.json of nvfp4-lab "
                                          "prepare-data"):
        run_tokenizer(tmp_path / "run", shards(tmp_path))
