"""docs/gpu_scale.md as a user follows it: the CPU rehearsal's block run end to end in bash
(a local corpus and tokenizer, prepare-data, the dry run, the sweep with W&B offline, eval,
plot, publish), and every command of the GPU steps composed and checked as the command line
would check it, what only a GPU machine can answer left to notes."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.runs import process_env
from omegaconf import DictConfig

from nvfp4_lab.cli import COMMANDS
from nvfp4_lab.config.preflight import check, composed
from nvfp4_lab.harness.command import EvalArgs

PAGE = Path(__file__).resolve().parents[2] / "docs" / "gpu_scale.md"
REHEARSAL = "## Rehearse the chain on a CPU"
BASH = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)
TIMEOUT = 1200


def blocks(text: str) -> list[str]:
    return BASH.findall(text)


def gpu_commands() -> list[list[str]]:
    """The nvfp4-lab commands of the page's GPU steps (before the rehearsal)."""
    steps = PAGE.read_text().split(REHEARSAL)[0]
    return [shlex.split(line, comments=True)[1:] for block in blocks(steps)
            for line in block.splitlines() if line.startswith("nvfp4-lab ")]


def test_every_gpu_step_composes_as_the_command_line_checks_it(capsys):
    commands = gpu_commands()
    assert [c[0] for c in commands] == ["info", "prepare-data", "run", "run", "eval", "plot",
                                        "publish"]
    for sub, *args in commands:
        assert sub in COMMANDS
        if sub == "run":
            assert check(args, dry_run=True) is None, args
        elif sub == "prepare-data":
            cfg = composed(args)
            assert isinstance(cfg, DictConfig) and cfg.data.name == "HuggingFaceFW/fineweb-edu"
            assert (cfg.data.tokenizer, cfg.data.path) == ("gpt2", "data/fineweb-edu-gpt2")
        elif sub == "eval":
            assert EvalArgs.parse(args).tasks == ["hellaswag", "arc_easy", "piqa"]


@pytest.mark.slow
def test_the_cpu_rehearsal_runs_from_prepare_to_publish(tmp_path):
    pytest.importorskip("datasets")
    pytest.importorskip("lm_eval")
    pytest.importorskip("wandb")
    [script] = blocks(PAGE.read_text().split(REHEARSAL)[1])
    env = {k: v for k, v in process_env().items()
           if not k.startswith("WANDB_") and k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    home = tmp_path / "home"
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
               NVFP4_LAB_CACHE=str(home / "cache"), WANDB_CONFIG_DIR=str(home / "wandb"),
               WANDB_CACHE_DIR=str(home / "wandb_cache"), WANDB_DATA_DIR=str(home / "wandb"),
               NETRC=str(home / "netrc"))
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(["bash", "-e", "-c", script], cwd=work, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (work / "data" / "fineweb-edu-gpt2" / "manifest.json").is_file()
    assert "extrapolated from the steps of small and base measured on an NVIDIA H200" in \
        done.stdout
    [sweep] = (work / "outputs" / "sweeps" / "formats").iterdir()
    runs = sorted(p.parent for p in sweep.glob("*/seed=0/summary.json"))
    assert len(runs) == 4
    for run in runs:
        assert json.loads((run / "summary.json").read_text())["status"] == "done"
        assert "toy_choice" in json.loads((run / "eval.json").read_text())["quantized"]
        assert list((run / "logs" / "wandb").glob("offline-run-*"))
    assert "## Downstream tasks" in (sweep / "report.md").read_text()
    published = work / "results-gpu" / "formats"
    assert len(list(published.glob("*/seed=0/eval.json"))) == 4
    assert "## Downstream tasks" in (published / "report.md").read_text()
    assert (work / "results-gpu" / "README.md").is_file()
