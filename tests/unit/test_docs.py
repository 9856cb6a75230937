"""The repository documents itself: every citation points at a file in it.

Code, configs and tests cite the project's own pages under ``docs/`` (``docs/numerics.md,
NVFP4``). The team's planning notes (the paper digest, the implementation survey, the
ecosystem study, the design card, the Triton notes) are not in the repository, so a citation
of one of them by its bare file name is a dead end for anyone who clones it. Checked here,
over every tracked file and every untracked one that git does not ignore, outside any virtual
environment made in the checkout:

(a) no file outside docs/ cites one of those notes by its bare name;
(b) every ``docs/<name>.md`` mentioned anywhere exists, and where a citation names a section
    (``docs/<name>.md, Section``, capitalised), that page has a heading that the cited text
    starts with, or one that starts with the cited name's first word (``E04``); the same for
    the sections of ``benchmarks/RESULTS.md`` and ``notebooks/LOG.md``, where measurements
    and the story live;
(c) every relative markdown link in docs/*.md resolves to a file, and its ``#anchor`` to a
    heading of that file.
"""
from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from nvfp4_lab.config.preflight import composed

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# the planning notes that live outside the repository (names assembled so this file does
# not cite them itself)
NOTES = ("paper", "implementations", "ecosystem", "design", "triton_notes")
NOTE = re.compile(r"(?<![\w-])(?:" + "|".join(NOTES) + r")\.md\b")
DOC_PATH = re.compile(r"(?<![\w./-])(docs/[\w.-]+\.md|benchmarks/RESULTS\.md|notebooks/LOG\.md)"
                      r"(?:, ([^\n]*))?")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
FENCED = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)    # a fenced block; 1: its code


def _git_files(root: Path) -> list[str]:
    """The project's files under ``root``: tracked, and untracked but not ignored, less
    anything inside a virtual environment (a folder holding ``pyvenv.cfg``), which the README
    makes inside the checkout and which no ``.gitignore`` can be relied on to hide."""
    try:
        out = []
        for args in (["ls-files"], ["ls-files", "--others", "--exclude-standard"]):
            out += subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                                  check=True, timeout=60).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout")
    is_venv = functools.cache(lambda folder: (root / folder / "pyvenv.cfg").is_file())
    return sorted({rel for rel in out
                   if not any(map(is_venv, list(Path(rel).parents)[:-1]))})  # [-1]: "."


def _texts(root: Path = ROOT):
    """(path, text) of every project file under ``root`` that is text (``_git_files``)."""
    for rel in _git_files(root):
        path = root / rel
        if not path.is_file():
            continue  # deleted in the working tree, or a submodule
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            yield rel, data.decode("utf-8")
        except UnicodeDecodeError:
            continue


def _headings(page: Path) -> list[str]:
    text = FENCED.sub("", page.read_text(encoding="utf-8"))
    return [h.strip() for h in HEADING.findall(text)]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def test_no_bare_citations_of_notes_outside_the_repo():
    bad = [f"{rel}:{_line(text, m.start())}: {m.group(0)}"
           for rel, text in _texts() if not rel.startswith("docs/")
           for m in NOTE.finditer(text) if not text.endswith("docs/", 0, m.start())]
    assert not bad, ("cite the project's own docs (docs/numerics.md, docs/experiments.md, "
                     "docs/architecture.md, docs/triton.md) instead of notes that are not in "
                     "the repository:\n" + "\n".join(bad))


def _dangling_citations(root: Path) -> list[str]:
    """``path:line: problem`` for each citation of a page under ``root`` that does not exist,
    or that lacks the section it names."""
    bad = []
    for rel, text in _texts(root):
        for m in DOC_PATH.finditer(text):
            page = root / m.group(1)
            where = f"{rel}:{_line(text, m.start())}"
            if not page.is_file():
                bad.append(f"{where}: {m.group(1)} does not exist")
                continue
            rest = (m.group(2) or "").strip()
            token = re.match(r"[A-Z0-9][\w.+-]*", rest)
            if not token:
                continue  # a path without a section name (sections start upper case)
            heads = _headings(page)
            if not any(rest.startswith(h) or h.startswith(token.group(0)) for h in heads):
                bad.append(f"{where}: {m.group(1)} has no section {rest[:40]!r}")
    return bad


def test_cited_docs_exist_with_their_sections():
    bad = _dangling_citations(ROOT)
    assert not bad, "\n".join(bad)


def test_a_virtual_environment_in_the_checkout_is_not_scanned(tmp_path):
    """The README makes ``.venv`` inside the checkout; its site-packages cite pages of their
    own projects (pyparsing's grammar page). With no ``.gitignore`` to hide it, the scan
    still skips it, and still reports the same citation in a file of the project."""
    if shutil.which("git") is None:
        pytest.skip("no git")
    page = "docs/" + "grammar.md"     # assembled: this file does not cite it itself
    cite = f"see {page}\n"
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "mod.py").write_text(f"# {cite}")
    package = tmp_path / ".venv" / "lib" / "python3.11" / "site-packages" / "x"
    package.mkdir(parents=True)
    (tmp_path / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (package / "__init__.py").write_text(f'"""{cite}"""\n')
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True, timeout=60)
    assert _dangling_citations(tmp_path) == [f"src/mod.py:1: {page} does not exist"]


def test_relative_links_in_docs_resolve():
    pages = sorted(DOCS.glob("*.md"))
    assert pages, "docs/ has no pages"
    bad = []
    for page in pages:
        text = FENCED.sub("", page.read_text(encoding="utf-8"))
        text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
        for m in LINK.finditer(text):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            where = f"docs/{page.name}: ({target})"
            if not dest.exists():
                bad.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and dest.is_file():
                if anchor not in {_slug(h) for h in _headings(dest)}:
                    bad.append(f"{where}: no heading with anchor #{anchor}")
    assert not bad, "\n".join(bad)


def test_the_readme_lists_every_ablation():
    """The README's table of ``+ablation=`` files names each file of conf/ablation/."""
    readme = (ROOT / "README.md").read_text()
    table = readme.split("| `+ablation=` |")[1].split("\n\n")[0]
    named = set(re.findall(r"`(\w+)`", table))
    files = {p.stem for p in (ROOT / "src" / "nvfp4_lab" / "conf" / "ablation").glob("*.yaml")}
    assert files <= named, sorted(files - named)


# a dotted key as a documented override names it: `train.max_steps=64`
OVERRIDE_KEY = re.compile(r"(?<![\w./+~-])([a-z_]+(?:\.\w+)+)=")


def _code(text: str) -> str:
    """The page's code: its fenced blocks and its inline spans."""
    return "\n".join([*FENCED.findall(text), *re.findall(r"`([^`\n]+)`", FENCED.sub("", text))])


def test_every_config_key_the_docs_override_exists():
    """A key of a config section (``train.``, ``quant.``, ...) named in an override on a page
    of docs/ or the README is a key of the composed config: a renamed or misplaced key (the
    root's ``resume=`` written ``train.resume=``) fails here, not in a user's terminal."""
    cfg = composed([])
    named = {(page.name, key) for page in [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]
             for key in OVERRIDE_KEY.findall(_code(page.read_text(encoding="utf-8")))
             if key.split(".")[0] in cfg}
    assert len(named) >= 10                 # the pages do name keys: the pattern finds them
    missing = sorted(f"{page}: {key}=" for page, key in named
                     if OmegaConf.select(cfg, key, default=KeyError) is KeyError)
    assert not missing, missing


LAB_LOG_WORDS = re.compile(r"\bsessions? \d+|\bthis session\b|\blanes?\b|SIGSTOP|SIGCONT|worktree",
                           re.I)
# the pre-registration is an append-only record: its dated entries stay as they were written
DATED_RECORD = ROOT / "results" / "preregistration.md"


def _lab_log_words(text: str, name: str) -> list[str]:
    return [f"{name}:{n}: {m.group(0)!r}" for n, line in enumerate(text.splitlines(), 1)
            for m in LAB_LOG_WORDS.finditer(line)]


def test_results_and_docs_pages_speak_to_readers_not_of_the_lab_log():
    """How the work went (sessions, lanes, paused processes) is the lab log's story
    (notebooks/LOG.md): the pages a reader opens say what was found and how to use it."""
    pages = [p for p in [*DOCS.glob("*.md"), *(ROOT / "results").rglob("*.md")]
             if p != DATED_RECORD]
    assert len(pages) > 20
    assert [hit for page in pages
            for hit in _lab_log_words(page.read_text(), str(page.relative_to(ROOT)))] == []


def test_the_lab_log_words_are_caught_where_they_are_written():
    text = "A plan.\nMeasured in session 31 while the two lanes ran; SIGSTOP between.\n"
    assert _lab_log_words(text, "page.md") == [
        "page.md:2: 'session 31'", "page.md:2: 'lanes'", "page.md:2: 'SIGSTOP'"]


def test_the_gpu_scale_page_states_what_the_code_gives():
    """docs/gpu_scale.md's parameters and tokens (the model's modules counted), and each
    recipe's extrapolated step and run as the dry run prints them (worked out from the CSV)."""
    from helpers.gpu_scale import h200_seconds, hours, params, steps

    page = (DOCS / "gpu_scale.md").read_text(encoding="utf-8")
    n = params()
    assert f"{n:,} non-embedding" in page and f"{n + 2 * 50304 * 768:,} with the" in page
    assert f"20 × {n:,} = {20 * n:,}" in page and f"{steps()} steps" in page
    for fmt in ("bf16", "fp8", "mxfp4", "nvfp4"):
        seconds, step_s = h200_seconds(fmt, steps())
        assert f"| `{fmt}` | {step_s:.2f} | {hours(seconds)} |" in page, fmt
