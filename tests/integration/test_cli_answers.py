"""What the command line answers before any training: every subcommand's ``--help``, the
``--version`` that names what decides the numbers, ``-m`` anywhere among the overrides, and a
multi-device trainer in a sweep refused in one line before anything is written. The real
command, as a subprocess: exit code, output, and what it wrote."""
from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import nvfp4_lab

DATA_OPTIONS = ", ".join(sorted(p.stem for p in
                                (Path(nvfp4_lab.__file__).parent / "conf" / "data").glob("*.yaml")))
SCRIPT = Path(sys.executable).with_name("nvfp4-lab")
CMD = str(SCRIPT) if SCRIPT.exists() else shutil.which("nvfp4-lab")


def call(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([CMD, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CI": "1"}, cwd=cwd)


@pytest.mark.parametrize("command", ["prepare-data", "info", "bench", "plot", "compare",
                                     "publish"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_subcommand_answers_help_with_its_own_usage(command, flag):
    r = call(command, flag)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith(f"usage: nvfp4-lab {command}"), r.stdout
    assert "Traceback" not in r.stderr and "no benchmark" not in r.stderr, r.stderr


def test_bench_help_lists_the_benchmarks_of_the_checkout():
    here = sorted(p.stem.removeprefix("bench_") for p in
                  (Path(__file__).parents[2] / "benchmarks").glob("bench_*.py"))
    assert here and ", ".join(here) in call("bench", "--help").stdout


@pytest.mark.parametrize("args", [["--version"], ["-V"], ["run", "--version"]])
def test_version_names_nvfp4_lab_torch_lightning_and_hydra(args):
    r = call(*args)
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    assert "\n" not in line and line.startswith(f"nvfp4-lab {nvfp4_lab.__version__} ("), line
    for package in ("torch", "lightning", "hydra-core"):
        assert f"{package} {importlib.metadata.version(package)}" in line, line


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["run", "--help"],
                                  ["run", "model.d_modle=64"], ["run", "train.max_steps=-3"],
                                  ["plot", "--help"], ["publish", "--help"],
                                  ["compare", "--help"], ["info", "--help"],
                                  ["prepare-data", "--help"], ["run", "seed=0,1"],
                                  ["run", "--dry-run", "+tokens_per_step=512"]])
def test_help_version_and_refusals_load_no_torch_lightning_or_pandas(args):
    """What answers in under a second (benchmarks/bench_cli.py) imports none of them."""
    code = ("import sys\n"
            "from nvfp4_lab.cli import main\n"
            "try:\n"
            f"    rc = main({args!r})\n"
            "except SystemExit as exit:\n"
            "    rc = exit.code\n"
            "print(rc, sorted(m for m in ('torch', 'lightning', 'pandas', 'matplotlib')\n"
            "                 if m in sys.modules), file=sys.stderr)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    rc, loaded = r.stderr.splitlines()[-1].split(" ", 1)
    assert rc == ("2" if "=" in args[-1] else "0"), r.stderr
    assert loaded == "[]", r.stderr


def test_multirun_flag_may_stand_anywhere_among_the_overrides(tmp_path):
    r = call("run", "quant=bf16", "-m", "seed=0,1", "--dry-run", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("2 jobs, 1 at a time"), r.stdout
    assert not any(tmp_path.iterdir())                     # a dry run writes nothing


def test_a_multi_device_trainer_in_a_sweep_is_refused_before_anything_is_written(tmp_path):
    r = call("run", "trainer=ddp", "seed=0,1", "-m", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == r.stderr.strip().splitlines()[0], r.stderr    # one line
    assert "trainer.devices=auto inside a sweep" in r.stderr and "torchrun" in r.stderr
    assert "Traceback" not in r.stderr and not any(tmp_path.iterdir())


@pytest.mark.parametrize("override, says", [
    ("data=nope", f"no config data/nope (data=nope); the options of data: {DATA_OPTIONS}"),
    ("data.tokenizer=foo", "data.tokenizer='foo' is not one of bpe, bytes"),
    ("data.vocab_sise=512", "no key data.vocab_sise (data.vocab_sise=512); did you mean "
                            "data.vocab_size?"),
])
def test_prepare_data_refuses_a_bad_override_in_one_line_and_writes_nothing(tmp_path,
                                                                           override, says):
    r = call("prepare-data", override, f"data.cache_dir={tmp_path / 'cache'}", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == r.stderr.strip().splitlines()[0], r.stderr    # one line
    assert r.stderr.startswith(f"nvfp4-lab: {says}"), r.stderr
    assert not any(tmp_path.iterdir())


def test_a_checkpoint_cut_short_is_refused_in_one_line_and_left_as_it_was(tmp_path):
    """``resume=auto`` on a ``last.ckpt`` cut in half (a copy cut short): one line naming the
    file and the choices, exit 2, and nothing in the run directory written (torch's zip reader
    would fail only after the run had rewritten its config and summary)."""
    import torch

    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    torch.save({"global_step": 3, "state_dict": {"w": torch.ones(256)}}, ckpt)
    cut = ckpt.read_bytes()[:ckpt.stat().st_size // 2]
    ckpt.write_bytes(cut)
    r = call("run", f"hydra.run.dir={tmp_path / 'run'}", "data=pydoc", "model.n_layers=2",
             "quant.backend=reference", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith(f"nvfp4-lab: {ckpt} is not a readable checkpoint ("), r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert "restore the file" in r.stderr and "delete it" in r.stderr, r.stderr
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == [ckpt]
    assert ckpt.read_bytes() == cut


@pytest.mark.parametrize("overrides, says", [
    (["quant=nvfp4", "train.batch_size=1", "train.seq_len=6"],
     "train.batch_size=1 x train.seq_len=6 = 6 tokens a micro-batch, not a multiple of "
     "quant.rht.size=16 (the Hadamard transform on Wgrad works on whole chunks of 16 tokens); "
     "use train.batch_size=8, or a train.seq_len or quant.rht.size that makes the product a "
     "multiple"),
    # a sweep whose one arm, Quartet II's RHT of 128, does not divide the 64 tokens
    (["+ablation=recipes", "train.batch_size=1", "train.seq_len=64"],
     "arm quartet_ii: train.batch_size=1 x train.seq_len=64 = 64 tokens a micro-batch, not a "
     "multiple of quant.rht.size=128 (the Hadamard transform on Wgrad works on whole chunks "
     "of 128 tokens); use train.batch_size=2,"),
])
def test_a_micro_batch_the_wgrad_rht_cannot_cut_is_refused_before_anything_is_written(
        tmp_path, overrides, says):
    """Wgrad's RHT runs along a micro-batch's tokens in chunks of its size: a run that would
    stop at its first step, after writing its directory, is refused in one line instead."""
    r = call("run", "data=pydoc", "model.n_layers=2", *overrides, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith(f"nvfp4-lab: {says}"), r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert not any(tmp_path.iterdir())
