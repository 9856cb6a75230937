"""prepare / load_prepared: content, idempotence, atomicity, and refusal of mismatches."""
import importlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from nvfp4_lab.data import DataConfig, ShardError, load_prepared, load_tokenizer, prepare
from nvfp4_lab.data.corpus import pydoc_documents, textdir_documents
from nvfp4_lab.data.shards import read_header

# the package exports the function prepare(), which shadows the module of the same name
prepare_mod = importlib.import_module("nvfp4_lab.data.prepared")
SEPARATOR = {"bytes": "\0", "bpe": "<|endoftext|>"}


@pytest.mark.parametrize("tok", ["bytes", "bpe"])
def test_pydoc_content(pydoc_dirs, tok):
    cfg, path = pydoc_dirs[tok]
    data = load_prepared(path)
    meta = data.meta
    assert path == Path(cfg.cache_dir) / "pydoc" / ("bytes" if tok == "bytes" else "bpe512")
    assert sorted(p.name for p in path.iterdir()) == sorted(
        ["train.bin", "val.bin", "meta.json"] + (["tokenizer.json"] if tok == "bpe" else []))
    docs = dict(pydoc_documents())
    tokenizer = load_tokenizer(path, meta)
    assert data.vocab_size == tokenizer.vocab_size == (256 if tok == "bytes" else 512)
    for split, arr in (("train", data.train), ("val", data.val)):
        info = meta["splits"][split]
        names = info["documents"]
        assert info["tokens"] == len(arr) == read_header(path / f"{split}.bin").n_tokens
        assert info["bytes"] == sum(len(docs[n].encode()) for n in names)
        assert info["bytes_per_token"] == pytest.approx(info["bytes"] / info["tokens"])
        assert arr.max() < data.vocab_size
        # the shard is exactly: separator, document, separator, document, ...
        assert int(arr[0]) == data.eot_id
        assert int((np.asarray(arr) == data.eot_id).sum()) == len(names)
        text = tokenizer.decode(arr)
        assert text == "".join(SEPARATOR[tok] + docs[n] for n in names)
    train, val = meta["splits"]["train"]["documents"], meta["splits"]["val"]["documents"]
    assert sorted(train + val) == sorted(docs) and not set(train) & set(val)
    assert data.bytes_per_token == meta["splits"]["val"]["bytes_per_token"]
    if tok == "bpe":
        assert data.bytes_per_token > 1.5  # it compresses
    # at least val_fraction of the bytes is held out
    held = meta["splits"]["val"]["bytes"]
    assert held >= cfg.val_fraction * (held + meta["splits"]["train"]["bytes"])


def test_bpe_is_trained_on_train_split_only(monkeypatch, pydoc_cfg):
    seen = []
    real = prepare_mod.make_tokenizer

    def spy(kind, texts, vocab_size):
        seen.extend(texts)
        return real(kind, texts, vocab_size)
    monkeypatch.setattr(prepare_mod, "make_tokenizer", spy)
    cfg = pydoc_cfg("bpe", val_docs=["assert", "if"])
    prepare(cfg)
    docs = dict(pydoc_documents())
    assert sorted(seen) == sorted(t for n, t in docs.items() if n not in ("assert", "if"))


def test_second_call_does_no_work(monkeypatch, pydoc_cfg):
    cfg = pydoc_cfg("bpe")
    path = prepare(cfg)
    stamps = {p.name: p.stat().st_mtime_ns for p in path.iterdir()}

    def boom(*a, **k):
        raise AssertionError("prepare did work the second time")
    monkeypatch.setattr(prepare_mod, "load_documents", boom)
    monkeypatch.setattr(prepare_mod, "make_tokenizer", boom)
    assert prepare(cfg) == path
    assert {p.name: p.stat().st_mtime_ns for p in path.iterdir()} == stamps
    assert os.listdir(path.parent) == [path.name]  # no temporary folders left behind


def test_changed_recipe_is_refused_not_overwritten(pydoc_cfg):
    prepare(pydoc_cfg())
    with pytest.raises(FileExistsError, match=r"val_fraction: 0.05 there, 0.2 now"):
        prepare(pydoc_cfg(val_fraction=0.2))
    with pytest.raises(FileExistsError, match=r"val_docs: \[\] there, \['if'\] now"):
        prepare(pydoc_cfg(val_docs=["if"]))


def test_losing_a_race_uses_the_winner(monkeypatch, pydoc_cfg):
    """Another process finishes first while this one writes: this one's copy is dropped."""
    cfg = pydoc_cfg()
    real_write = prepare_mod._write
    winner = {}

    def write_then_lose(folder, *args):
        real_write(folder, *args)
        monkeypatch.setattr(prepare_mod, "_write", real_write)
        winner["path"] = prepare(cfg)  # "the other process"
        winner["meta"] = (winner["path"] / "meta.json").read_text()
    monkeypatch.setattr(prepare_mod, "_write", write_then_lose)
    path = prepare(cfg)
    assert path == winner["path"]
    assert (path / "meta.json").read_text() == winner["meta"]
    assert os.listdir(path.parent) == [path.name]


def test_crash_leaves_nothing(tmp_path, monkeypatch, pydoc_cfg):
    def crash(folder, *args):
        (folder / "train.bin").write_bytes(b"half")
        raise KeyboardInterrupt
    monkeypatch.setattr(prepare_mod, "_write", crash)
    with pytest.raises(KeyboardInterrupt):
        prepare(pydoc_cfg())
    assert os.listdir(tmp_path / "pydoc") == []


@pytest.fixture
def copy_of(tmp_path, pydoc_dirs):
    """A writable copy of the prepared pydoc bytes folder."""
    dst = tmp_path / "copy"
    shutil.copytree(pydoc_dirs["bytes"][1], dst)
    return dst


def test_meta_header_mismatch_is_refused(copy_of):
    meta = json.loads((copy_of / "meta.json").read_text())
    meta["splits"]["val"]["tokens"] += 1
    (copy_of / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ShardError, match="val.bin: header n_tokens="):
        load_prepared(copy_of)


def test_foreign_tokenizer_is_refused(copy_of):
    meta = json.loads((copy_of / "meta.json").read_text())
    meta["tokenizer"]["fingerprint"] = "f" * 64
    (copy_of / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ShardError, match="fingerprint"):
        load_prepared(copy_of)


def test_truncated_shard_is_refused(copy_of):
    train = copy_of / "train.bin"
    train.write_bytes(train.read_bytes()[:-10])
    with pytest.raises(ShardError, match="truncated"):
        load_prepared(copy_of)


def test_bin_source_uses_the_folder_as_is(copy_of, tmp_path):
    cfg = DataConfig(source="bin", path=str(copy_of), cache_dir=str(tmp_path / "unused"))
    assert prepare(cfg) == copy_of
    assert not (tmp_path / "unused").exists()
    (copy_of / "meta.json").unlink()
    with pytest.raises(ShardError, match="no meta.json"):
        prepare(cfg)
    with pytest.raises(FileNotFoundError, match="not a folder"):
        prepare(DataConfig(source="bin", path=str(tmp_path / "nope")))


def test_textdir(tiny_text, tmp_path):
    cfg = DataConfig(source="textdir", path=str(tiny_text), tokenizer="bpe", vocab_size=384,
                     val_docs=["poems/sonnet_18.txt"], cache_dir=str(tmp_path))
    path = prepare(cfg)
    # folder name: textdir-<folder name>-<hash of its absolute path>/<tokenizer tag>
    assert path.name == "bpe384" and path.parent.name.startswith("textdir-tiny_text-")
    data = load_prepared(path)
    docs = dict(textdir_documents(tiny_text))
    assert data.meta["splits"]["val"]["documents"] == ["poems/sonnet_18.txt"]
    tok = load_tokenizer(path, data.meta)
    assert tok.decode(data.val) == "<|endoftext|>" + docs["poems/sonnet_18.txt"]
    # a tiny corpus runs out of merges: the model is still built for the configured size
    assert data.vocab_size == 384 >= data.meta["tokenizer"]["learned_vocab_size"]


def test_textdir_change_is_noticed(tiny_text, tmp_path):
    src = tmp_path / "texts"
    shutil.copytree(tiny_text, src)
    cfg = DataConfig(source="textdir", path=str(src), tokenizer="bytes",
                     cache_dir=str(tmp_path / "cache"))
    prepare(cfg)
    (src / "new.txt").write_text("A new document.\n")
    with pytest.raises(FileExistsError, match="corpus"):
        prepare(cfg)


def test_missing_val_doc_is_reported_before_any_work(tiny_text, tmp_path):
    cfg = DataConfig(source="textdir", path=str(tiny_text), tokenizer="bytes",
                     val_docs=["hamlet.txt"], cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"\['hamlet.txt'\].*available: gettysburg.txt, "
                                         r"poems/sonnet_116.txt"):
        prepare(cfg)
    assert not any(tmp_path.rglob("*.bin"))
