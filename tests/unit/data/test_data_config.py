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
])
def test_bad_values_name_the_key(kw, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        DataConfig(**kw)


def test_bytes_ignores_vocab_size_and_tags():
    assert DataConfig(tokenizer="bytes", vocab_size=1).tokenizer_tag == "bytes"
    assert DataConfig(vocab_size=2048).tokenizer_tag == "bpe2048"


def test_omegaconf_structured_schema():
    """omegaconf 2.3 accepts the schema and runs the checks when it builds the object."""
    schema = OmegaConf.structured(DataConfig)
    cfg = OmegaConf.to_object(OmegaConf.merge(schema, {"source": "pydoc",
                                                       "val_docs": ["assert"]}))
    assert isinstance(cfg, DataConfig) and cfg.val_docs == ["assert"]
    assert type(cfg.val_docs) is list
    with pytest.raises(ValueError, match="data.source='x'"):
        OmegaConf.to_object(OmegaConf.merge(schema, {"source": "x"}))
