"""``nvfp4-lab eval`` as a user runs it (in-process): eval.json written, a finished score
kept unless --overwrite, and each mistake one line, exit 2, nothing written."""
from __future__ import annotations

import importlib.util
import json
import math
import shutil

import pytest
from helpers.tiny_runs import TASK, train_tiny, write_choice_task

from nvfp4_lab.cli import main

pytest.importorskip("lm_eval")

DOCS = [{"q": "Help on module", "choices": ["os", "pydoc", "zzz"], "gold": 1},
        {"q": "The", "choices": ["class", "qqq"], "gold": 0},
        {"q": "Return the", "choices": ["value", "xyz", "!!", "of"], "gold": 3}]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A folder holding one finished nvfp4 run, and the task."""
    root = tmp_path_factory.mktemp("sweep")
    train_tiny(root / "runs", "nvfp4")
    write_choice_task((root / "tasks").mkdir() or root / "tasks", DOCS)
    return root


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_scores_are_written_and_kept_unless_overwritten(sweep, capsys):
    run, args = sweep / "runs" / "nvfp4", [f"include={sweep / 'tasks'}", f"tasks={TASK}"]
    assert main(["eval", str(sweep / "runs"), *args, "limit=2"]) == 0
    first = (run / "eval.json").read_text()
    score = json.loads(first)["quantized"][TASK]
    assert (score["n"], score["step"], score["limit"]) == (2, 2, 2.0)
    assert score["chance"] == pytest.approx((1 / 3 + 1 / 2) / 2)
    acc = score["acc"]      # lm-eval's standard error of a mean of 0/1 (ddof 1)
    assert acc in (0.0, 0.5, 1.0) and score["acc_stderr"] == pytest.approx(
        math.sqrt(acc * (1 - acc) / (2 - 1)))
    assert main(["eval", str(run), *args]) == 0           # the limit is not a new task
    assert "already scored" in capsys.readouterr().out
    assert (run / "eval.json").read_text() == first
    assert main(["eval", str(run), *args, "forward=bf16", "--overwrite"]) == 0
    both = json.loads((run / "eval.json").read_text())
    assert both["quantized"] == json.loads(first)["quantized"]
    assert both["bf16"][TASK]["n"] == 3 and both["bf16"][TASK]["chance"] == pytest.approx(
        (1 / 3 + 1 / 2 + 1 / 4) / 3)


def refused(capsys, argv) -> str:
    assert main(["eval", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_mistakes_are_one_line_and_write_nothing(sweep, tmp_path, capsys, monkeypatch):
    run = sweep / "runs" / "nvfp4"
    bare = tmp_path / "bare"      # the run less its checkpoint
    shutil.copytree(run, bare, ignore=shutil.ignore_patterns("checkpoints", "eval.json"))
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    task = [f"include={sweep / 'tasks'}", f"tasks={TASK}"]
    assert "has no checkpoints/last.ckpt" in refused(capsys, [str(bare), *task])
    assert "tasks='no_such_task'" in refused(capsys, [str(run), "tasks=no_such_task"])
    assert "unknown argument 'limt'" in refused(capsys, [str(run), *task, "limt=3"])
    assert "forward" in refused(capsys, [str(run), *task, "forward=fp4"])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "lm_eval" else real(name, *a))
    assert "pip install 'nvfp4-lab[eval]'" in refused(capsys, [str(run), *task])
    assert not (bare / "eval.json").exists()
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_a_sweeps_job_directory_is_a_path_though_its_name_holds_an_equals_sign(tmp_path):
    """Hydra names a sweep's jobs ``3_quant=nvfp4/seed=0``: given as it is, it is a path, not
    a key; a key=value that is no path stays a key."""
    from nvfp4_lab.harness.command import EvalArgs

    job = tmp_path / "3_quant=nvfp4" / "seed=0"
    job.mkdir(parents=True)
    args = EvalArgs.parse([str(job), "tasks=arc_easy,piqa", "limit=5"])
    assert (args.paths, args.tasks, args.limit) == ([job], ["arc_easy", "piqa"], 5.0)
