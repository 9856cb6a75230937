"""DataConfig: bad values fail when the config is built, naming the key and what is allowed."""
import pytest
from omegaconf import OmegaConf

from nvfp4_lab.data import DataConfig


@pytest.mark.parametrize("kw, message", [
    ({"source": "foo"}, "data.source='foo' is not one of shakespeare, pycode, pydoc, textdir, bin"),
    ({"tokenizer": "gpt2"}, "data.tokenizer='gpt2' is not one of bpe, bytes"),
    ({"vocab_size": 100}, "data.vocab_size=100 must be in"),
    ({"source": "textdir"}, "data.source=textdir needs data.path"),
    ({"source": "bin"}, "data.source=bin needs data.path"),
    ({"val_fraction": 0.0}, "data.val_fraction=0.0 must be in"),
    ({"val_fraction": 1.0}, "data.val_fraction=1.0 must be in"),
    ({"val_docs": ["a", "a"]}, "names a document twice"),
    ({"cache_dir": ""}, "data.cache_dir is empty"),
    ({"order": "shuffled"}, "data.order='shuffled' is not one of random, sequential"),
    ({"format": "gpt2"}, "data.format='gpt2' is not one of auto, nanogpt"),
    ({"source": "shards", "path": "d", "val": "v*"}, "data.source=shards needs data.train"),
    ({"source": "shards", "path": "d", "train": "t*"}, "data.source=shards needs data.val"),
    ({"source": "shards", "train": "t*", "val": "v*"},
     "data.source=shards needs data.path"),
    ({"source": "shards", "path": "d", "train": "t*", "val": "v*", "vocab_size": -1},
     "data.vocab_size=-1 must be in"),
])
def test_bad_values_name_the_key(kw, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        DataConfig(**kw)


def test_bytes_ignores_vocab_size_and_tags():
    assert DataConfig(tokenizer="bytes", vocab_size=1).tokenizer_tag == "bytes"
    assert DataConfig(vocab_size=2048).tokenizer_tag == "bpe2048"


def test_shards_take_any_vocabulary_the_model_can_have():
    """No BPE range for shards: nanoGPT's 65 characters, or 0 for what the files state."""
    for vocab in (0, 65, 128256):
        assert DataConfig(source="shards", path="d", train="t*", val="v*",
                          vocab_size=vocab).vocab_size == vocab


def test_omegaconf_structured_schema():
    """omegaconf 2.3 accepts the schema and runs the checks when it builds the object."""
    schema = OmegaConf.structured(DataConfig)
    cfg = OmegaConf.to_object(OmegaConf.merge(schema, {"source": "pydoc",
                                                       "val_docs": ["assert"]}))
    assert isinstance(cfg, DataConfig) and cfg.val_docs == ["assert"]
    assert type(cfg.val_docs) is list
    with pytest.raises(ValueError, match="data.source='x'"):
        OmegaConf.to_object(OmegaConf.merge(schema, {"source": "x"}))


def test_prepare_data_help_lists_each_option_of_the_data_group_and_each_key(capsys):
    """Read back from ``prepare-data --help``: every file of conf/data with the source and
    tokenizer it sets, and every key of DataConfig with what it takes."""
    import dataclasses

    import yaml

    from nvfp4_lab.cli import main
    from nvfp4_lab.configs import conf_dir

    assert main(["prepare-data", "--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    files = sorted((conf_dir() / "data").glob("*.yaml"))
    assert len(files) >= 5
    for path in files:
        doc = yaml.safe_load(path.read_text())
        for parent in [d for d in doc.get("defaults", []) if d != "_self_"]:   # a preset
            doc = {**yaml.safe_load((path.parent / f"{parent}.yaml").read_text()), **doc}
        line = next((s for s in lines if s.split()[:1] == [path.stem]), "")
        assert f"source={doc['source']} tokenizer={doc['tokenizer']}" in line, (path, lines)
    keys = {s.split()[0]: s for s in lines if s.startswith("  data.")}
    assert set(keys) == {f"data.{f.name}" for f in dataclasses.fields(DataConfig)}, lines
    assert keys["data.tokenizer"].endswith("one of bpe, bytes; hf: a hub name or a "
                                           "tokenizer.json")
    assert "(default shakespeare)" in " ".join(lines)


@pytest.mark.parametrize("value, count", [
    ("2e9", 2_000_000_000), ("2_000_000_000", 2_000_000_000), (2e9, 2_000_000_000),
    (2_000_000_000, 2_000_000_000), ("1.5e3", 1500), ("7", 7)])
def test_a_count_reads_as_written(value, count):
    cfg = DataConfig(source="hf", name="d", path="o", max_tokens=value, shard_tokens=value)
    assert cfg.max_tokens == count and cfg.shard_tokens == count


@pytest.mark.parametrize("value", ["2e9x", "two", "1.5", 0, -3, 2.5, True, float("inf"),
                                   "2_000__0"])
def test_a_bad_count_is_one_line_naming_the_key_and_the_forms(value):
    with pytest.raises(ValueError) as err:
        DataConfig(source="hf", name="d", path="o", max_tokens=value)
    assert str(err.value).startswith(f"data.max_tokens={value!r} is not a count")
    assert "2e9" in str(err.value) and "\n" not in str(err.value)


def test_hydra_reads_2e9_on_the_command_line_as_a_count():
    from nvfp4_lab.config.preflight import composed
    from nvfp4_lab.config.schema import plain

    cfg = composed(["data=fineweb_edu", "data.path=o", "data.max_tokens=2e9"])
    data = plain(cfg.data, DataConfig)
    assert data.max_tokens == 2_000_000_000 and data.shard_tokens == 100_000_000
    assert (data.name, data.subset, data.tokenizer) == ("HuggingFaceFW/fineweb-edu",
                                                        "sample-10BT", "gpt2")
