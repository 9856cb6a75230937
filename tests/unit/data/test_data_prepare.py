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


# --- once per machine ----------------------------------------------------------------------

# prepare() in a fresh process that records each preparation it does in ``log`` and, once
# ``ready`` holds ``n`` processes, starts with the others; a preparation takes a second more,
# so that the others arrive while it runs
PREPARE = """
import os, sys, time
from pathlib import Path
from nvfp4_lab.data import prepared
from nvfp4_lab.data.config import DataConfig

log, ready, n, cache_dir = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
write = prepared._write
def counted(folder, *args):
    with open(log, "a") as f:
        f.write(f"{os.getpid()}\\n")
    time.sleep(1.0)
    write(folder, *args)
prepared._write = counted
(ready / str(os.getpid())).touch()
while len(list(ready.iterdir())) < n:
    time.sleep(0.02)
where = {"cache_dir": cache_dir} if cache_dir else {}     # else the default
print(prepared.prepare(DataConfig(source="pydoc", tokenizer="bytes", **where)))
"""


def _prepare_in(cwds: list[Path], tmp: Path, cache_dir: str = "") -> tuple[list[str], set[Path]]:
    """Run PREPARE in one process per folder of ``cwds``, all at once: (every preparation
    logged in ``tmp`` so far, the folders they returned)."""
    import subprocess
    import sys

    (tmp / "ready").mkdir(exist_ok=True)
    for ready in (tmp / "ready").iterdir():
        ready.unlink()
    env = {**os.environ, "NVFP4_LAB_CACHE": str(tmp / "cache")}
    procs = [subprocess.Popen([sys.executable, "-c", PREPARE, str(tmp / "log"), str(tmp / "ready"),
                               str(len(cwds)), cache_dir], cwd=cwd, env=env, text=True,
                              stdout=subprocess.PIPE) for cwd in cwds]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    log = (tmp / "log").read_text().split() if (tmp / "log").exists() else []
    return log, {Path(out.strip()).resolve() for out in outs}


def test_two_processes_prepare_one_corpus_once(tmp_path):
    """Two jobs of a sweep that need the same corpus at once: one prepares it, the other
    waits for it and reuses it."""
    log, found = _prepare_in([tmp_path, tmp_path], tmp_path, str(tmp_path / "data"))
    assert len(log) == 1 and found == {(tmp_path / "data" / "pydoc" / "bytes").resolve()}
    assert load_prepared(found.pop()).meta["splits"]["train"]["tokens"] > 0


def test_a_run_from_another_directory_reuses_the_corpus(tmp_path):
    """By default the corpus is prepared in the user cache, not under the directory the
    command runs in: a second directory finds it there."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    first, found_first = _prepare_in([one], tmp_path)
    second, found_second = _prepare_in([two], tmp_path)
    cached = (tmp_path / "cache" / "data" / "pydoc" / "bytes").resolve()
    assert len(first) == len(second) == 1              # the log holds the first's only
    assert found_first == found_second == {cached}
    assert not (one / "outputs").exists() and not (two / "outputs").exists()


def test_prepared_bytes_do_not_depend_on_where_they_are_cached(pydoc_dirs, tmp_path):
    """The published runs' data_fingerprint still names the data prepared in the new place."""
    cfg, path = pydoc_dirs["bytes"]
    moved = prepare(DataConfig(source="pydoc", tokenizer="bytes", vocab_size=512,
                               cache_dir=str(tmp_path / "elsewhere")))
    assert load_prepared(moved).fingerprint == load_prepared(path).fingerprint
    for name in ("train.bin", "val.bin", "meta.json"):
        assert (moved / name).read_bytes() == (path / name).read_bytes()
