"""prepare-data data=hf on files made here: the shards hold each document's own tokens after
the end-of-text token, in the split its hash names, whatever the input kind, the worker count
or an interruption; a user's mistake is one line, exit status 2, nothing written.

Nothing here reaches a network: the hub is off (set before ``datasets`` is imported), the
corpus and the tokenizer.json are generated, and shards are read back with
``helpers.hf_inputs.read_llmc``, not the library's reader."""
import os

os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")

import itertools  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from helpers.hf_inputs import (  # noqa: E402
    EOT,
    documents,
    is_val,
    read_llmc,
    train_tokenizer,
    write_corpus,
)
from tokenizers import Tokenizer  # noqa: E402

from nvfp4_lab.cli import prepare_data  # noqa: E402
from nvfp4_lab.data import DataConfig  # noqa: E402
from nvfp4_lab.data import hf_prepare as hp  # noqa: E402
from nvfp4_lab.data.hf_shards import ShardWriter  # noqa: E402

N_DOCS, SHARD, VAL = 2400, 700, 0.1


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """(documents, tokenizer.json, the jsonl folder)."""
    root = tmp_path_factory.mktemp("hf_corpus")
    docs = documents(N_DOCS)
    return docs, train_tokenizer(root / "tokenizer.json", docs), write_corpus(
        root / "jsonl", docs, "jsonl")


def _cfg(name, tok, out, **kw) -> DataConfig:
    return DataConfig(**{"source": "hf", "name": str(name), "tokenizer": str(tok),
                         "path": str(out), "shard_tokens": SHARD, "val_fraction": VAL, **kw})


@pytest.fixture(scope="module")
def whole(corpus, tmp_path_factory):
    """The jsonl corpus prepared in one go, one worker: the reference of the other tests."""
    docs, tok, folder = corpus
    return hp.prepare_hf(_cfg(folder, tok, tmp_path_factory.mktemp("whole") / "out"))


def _encoded(docs, tok) -> list[list[int]]:
    t = Tokenizer.from_file(str(tok))
    return [[t.token_to_id(EOT), *t.encode(d, add_special_tokens=False).ids] for d in docs]


def _shards(out: Path, stem: str, split: str) -> list[np.ndarray]:
    return [read_llmc(p) for p in sorted(out.glob(f"{stem}_{split}_*.bin"))]


def _files(out: Path) -> dict[str, bytes]:
    """Every shard's bytes, and what the manifest counts (its stream position depends on the
    batch size)."""
    m = hp.Manifest.read(out)
    return {**{p.name: p.read_bytes() for p in sorted(out.glob("*.bin*"))},
            "manifest": (m.recipe, m.documents, m.splits, m.finished)}


@pytest.mark.parametrize("kind", ["jsonl", "parquet", "arrow"])
def test_each_document_follows_eot_in_the_split_its_hash_names(kind, corpus, tmp_path):
    docs, tok, _ = corpus
    out = hp.prepare_hf(_cfg(write_corpus(tmp_path / kind, docs, kind), tok, tmp_path / "o"))
    encoded = _encoded(docs, tok)
    for split in ("train", "val"):
        want = [t for d, ids in zip(docs, encoded) if is_val(d, VAL) == (split == "val")
                for t in ids]
        shards = _shards(out, kind, split)
        assert len(shards) >= 2 and all(len(s) == SHARD for s in shards[:-1])
        assert 0 < len(shards[-1]) <= SHARD
        assert np.concatenate(shards).tolist() == want
    assert not list(out.glob("*.tmp"))


def test_max_tokens_stops_at_the_first_document_boundary_at_or_past_it(corpus, tmp_path):
    docs, tok, folder = corpus
    out = hp.prepare_hf(_cfg(folder, tok, tmp_path / "o", max_tokens="3e3"))
    ends = np.cumsum([len(ids) for ids in _encoded(docs, tok)])
    kept = int(np.argmax(ends >= 3000)) + 1
    written = sum(len(s) for split in ("train", "val") for s in _shards(out, "jsonl", split))
    assert written == ends[kept - 1] and ends[kept - 2] < 3000
    assert hp.Manifest.read(out).documents == kept


def test_an_interrupted_run_resumes_to_the_same_bytes(corpus, whole, tmp_path, monkeypatch):
    docs, tok, folder = corpus
    monkeypatch.setattr(hp, "BATCH_DOCUMENTS", 100)
    cfg = _cfg(folder, tok, tmp_path / "o")
    with pytest.raises(hp.Interrupted):
        hp.prepare_hf(cfg, stop_after=1250)
    saved = hp.Manifest.read(tmp_path / "o")
    assert 0 < saved.documents < 1250 and not saved.finished   # a tail to cut and redo
    assert list((tmp_path / "o").glob("*.tmp"))
    hp.prepare_hf(cfg)
    assert _files(tmp_path / "o") == _files(whole)


def test_a_run_killed_between_manifest_and_rename_resumes(corpus, whole, tmp_path,
                                                          monkeypatch):
    docs, tok, folder = corpus
    monkeypatch.setattr(hp, "BATCH_DOCUMENTS", 100)
    calls, commit = itertools.count(), ShardWriter.commit

    def dies_on_the_sixth(self):
        if next(calls) == 5 and self.pending:
            raise KeyboardInterrupt
        commit(self)
    monkeypatch.setattr(ShardWriter, "commit", dies_on_the_sixth)
    cfg = _cfg(folder, tok, tmp_path / "o")
    with pytest.raises(KeyboardInterrupt):
        hp.prepare_hf(cfg)
    monkeypatch.setattr(ShardWriter, "commit", commit)
    hp.prepare_hf(cfg)
    assert _files(tmp_path / "o") == _files(whole)


def test_two_workers_write_what_one_writes(corpus, whole, tmp_path, monkeypatch):
    docs, tok, folder = corpus
    monkeypatch.setattr(hp, "BATCH_DOCUMENTS", 300)
    out = hp.prepare_hf(_cfg(folder, tok, tmp_path / "o", workers=2))
    assert _files(out) == _files(whole)


def test_a_changed_recipe_is_refused_naming_the_key(corpus, whole):
    docs, tok, folder = corpus
    with pytest.raises(FileExistsError, match="shard_tokens: 700 there, 800 now"):
        hp.prepare_hf(_cfg(folder, tok, whole, shard_tokens=800))


@pytest.mark.parametrize("override, says", [
    ("data.name={tmp}/nowhere.jsonl", "data.name='{tmp}/nowhere.jsonl': no such file"),
    ("data.text_column=body", "data.text_column='body' is not a column of"),
    ("data.tokenizer={tmp}/none/tokenizer.json", "no such tokenizer.json"),
    ("data.max_tokens=2e9x", "data.max_tokens='2e9x' is not a count"),
    ("data.eot='</s>'", "the tokenizer has no </s> token; set data.eot"),
])
def test_a_mistake_is_one_line_exit_2_and_nothing_written(override, says, corpus, tmp_path,
                                                          capsys):
    docs, tok, folder = corpus
    out = tmp_path / "o"
    rc = prepare_data(["data=hf", f"data.name={folder}", f"data.tokenizer={tok}",
                       f"data.path={out}", override.format(tmp=tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert says.format(tmp=tmp_path) in err
    assert not out.exists()


@pytest.mark.parametrize("hub_name", ["dataset", "tokenizer"])
def test_a_hub_name_offline_without_a_cache_says_how_to_prepare_offline(hub_name, corpus,
                                                                         tmp_path):
    docs, tok, folder = corpus
    name, tokenizer = ("HuggingFaceFW/fineweb-edu", tok) if hub_name == "dataset" else (
        folder, "gpt2")
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from nvfp4_lab.cli import main; sys.exit(main())",
         "prepare-data", "data=hf", f"data.name={name}", f"data.tokenizer={tokenizer}",
         f"data.path={tmp_path / 'o'}"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    key = "data.name='HuggingFaceFW/fineweb-edu'" if hub_name == "dataset" else \
        "data.tokenizer='gpt2'"
    assert key in done.stderr and "pass" in done.stderr
    assert not (tmp_path / "o").exists()
