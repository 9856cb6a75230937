"""The ``nvfp4-lab`` command end to end: real subprocesses, as a user (or CI) runs it.

Every training run uses the fast offline settings (``FAST``: 2 blocks, pydoc bytes, the eager
reference backend, 64-token windows), so a run is a few seconds of training after ~8 s of
imports. To keep the module within a few minutes on 2 cores, the commands that do not depend on
one another start together in a background pool (``background``), while the tests that must
watch or kill a process (resume, refusal) run theirs in the foreground; each test then
only waits for its own results. The run everything else compares against (``ref``) is trained
once and shared.

Subprocesses get ``CI=1`` (plain progress lines, no rich bar) and ``OMP_NUM_THREADS=1`` (tiny
GEMMs on busy cores), and each one is killed with its whole process group after ``TIMEOUT``.
"""
from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.runs import SCRIPT, process_env
from omegaconf import OmegaConf

from nvfp4_lab.data import DataConfig, corpus, load_prepared, prepared_dir
from nvfp4_lab.quant.packaged import compile_cache_dir
from nvfp4_lab.sweep.plan import SweepPlan

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
TIMEOUT = 240  # seconds, per subprocess
COMPILE_CACHE = compile_cache_dir()

MODULE = [sys.executable, "-m", "nvfp4_lab.cli"]

FAST = ["data=pydoc", "model.n_layers=2", "quant.backend=reference", "train.seq_len=64",
        "train.batch_size=4", "train.val_batches=2", "train.warmup=0", "trainer.progress=plain"]
TOKENS_PER_STEP = 4 * 64  # batch_size * seq_len, one process

# The curve every run test shares: long enough after the first checkpoint that a kill there
# lands mid-run, a checkpoint and a validation every 4 steps, a logged row every step.
STEPS, EVERY = 24, 4
CURVE = [*FAST, f"train.max_steps={STEPS}", f"train.val_every={EVERY}",
         f"train.ckpt_every={EVERY}", "train.log_every=1"]

# nvfp4 with the paper's last 20% of blocks in BF16: of 2 blocks, block 1 stays high precision
QUANTIZED = {"blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.mlp.fc1", "blocks.0.mlp.fc2"}
HIGH_PRECISION = {n.replace("blocks.0", "blocks.1") for n in QUANTIZED} | {"lm_head"}


# --------------------------------------------------------------------------- processes

@dataclass
class Result:
    cmd: list[str]
    rc: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err

    def __str__(self) -> str:   # what an assertion message shows
        return (f"$ {' '.join(self.cmd)}\nexit {self.rc}\n--- stdout (tail)\n{self.out[-3000:]}"
                f"\n--- stderr (tail)\n{self.err[-5000:]}")


class Proc:
    """A command started in its own process group, its output going to files (so many can run
    at once without filling a pipe, and a test can read the output while it runs)."""

    def __init__(self, cmd: list[str], logs: Path, name: str, cwd: Path,
                 env: dict[str, str] | None = None):
        self.cmd, self.name = [str(c) for c in cmd], name
        self.stdout, self.stderr = logs / f"{name}.out", logs / f"{name}.err"
        with open(self.stdout, "w") as out, open(self.stderr, "w") as err:
            # the module's own timing ledger (runs record theirs; --dry-run reads it), the
            # machine's compile cache (warm graphs keep the compiled checks fast)
            env = {**process_env(), "NVFP4_LAB_CACHE": str(logs.parent / "lab-cache"),
                   "TORCHINDUCTOR_CACHE_DIR": str(COMPILE_CACHE), **(env or {})}
            self.p = subprocess.Popen(self.cmd, stdout=out, stderr=err, cwd=cwd, env=env,
                                      start_new_session=True)
        self.started = time.monotonic()

    def output(self) -> str:
        return self.stdout.read_text(errors="replace")

    def kill(self) -> None:
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait()

    def wait(self) -> Result:
        try:
            rc = self.p.wait(timeout=max(1.0, TIMEOUT - (time.monotonic() - self.started)))
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"{self.name} did not finish in {TIMEOUT} s\n{self.result(-9)}")
        return self.result(rc)

    def result(self, rc: int) -> Result:
        return Result(self.cmd, rc, self.output(), self.stderr.read_text(errors="replace"))


class Work:
    """The module's scratch folder: run directories, the data cache, the commands' output."""

    def __init__(self, root: Path):
        self.root = root
        self.out = root / "out"                  # output_root of every run
        self.logs = root / "logs"
        self.logs.mkdir()
        self.procs: list[Proc] = []
        self.closed = False                      # set at teardown: start nothing new

    def run_dir(self, name: str) -> Path:
        return self.root / "runs" / name

    def start(self, name: str, *args: str, cmd: list[str] | None = None,
              cwd: Path | None = None, env: dict[str, str] | None = None) -> Proc:
        """``nvfp4-lab run ARGS`` (``python -m nvfp4_lab.cli``), or ``cmd`` as given; ``env``
        adds to the subprocess environment."""
        if self.closed:
            raise RuntimeError(f"{name}: the module's processes were stopped")
        cmd = cmd if cmd is not None else [*MODULE, "run", *args]
        self.procs.append(Proc(cmd, self.logs, name, cwd or self.root, env))
        return self.procs[-1]

    def run(self, name: str, *args: str, **kw) -> Result:
        return self.start(name, *args, **kw).wait()

    def train_args(self, name: str, *extra: str) -> list[str]:
        return [*CURVE, f"output_root={self.out}", f"hydra.run.dir={self.run_dir(name)}", *extra]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Work:
    return Work(tmp_path_factory.mktemp("cli"))


@pytest.fixture(scope="module", autouse=True)
def background(work):
    """The commands no test needs to watch, started now, three at a time (2 cores; each
    process runs one thread). ``background[name].result()`` waits for one."""
    def sweep(name, *args):
        return [*FAST, f"output_root={work.out}", f"hydra.sweep.dir={work.root / name}", *args]

    plan = {
        # the shared reference run, the same config and seed again, another seed
        "ref": work.train_args("ref"),
        "same_seed": work.train_args("same_seed"),
        "other_seed": work.train_args("other_seed", "seed=1"),
        # nvfp4 first, so that the sweep has to go on after the failure. d_model=72 is a valid
        # model (72 / 4 heads = 18, even) that NVFP4's 16-element blocks cannot quantize.
        # The command-line check would refuse it up front; HYDRA_FULL_ERROR=1 skips that
        # check, so the job fails inside the sweep, as a failure no check foresees would.
        "bad_dim_sweep": ["-m", *sweep("bad_dim_sweep", "train.max_steps=2", "train.val_every=2",
                                       "train.ckpt_every=2", "train.log_every=1",
                                       "model.d_model=72", "quant=nvfp4,bf16")],
        "smoke": ["+ablation=smoke", f"output_root={work.out}",
                  f"hydra.sweep.dir={work.root / 'smoke'}"],
        "bad_key": [*work.train_args("bad_key"), "train.max_stepz=3"],
        "bad_value": [*work.train_args("bad_value"), "quant.format=nvfp5"],
        "bad_group": [*work.train_args("bad_group"), "quant=nvfp5"],
        "typo": [*work.train_args("typo"), "model.d_modle=64"],
        "negative_steps": [*work.train_args("negative_steps"), "train.max_steps=-3"],
        "help": None,
        # a rich bar on the terminal: its cli.log still gets the plain progress lines
        "rich_log": work.train_args("rich_log", "train.max_steps=8", "trainer.progress=rich"),
    }

    def job(name, args):
        if args is None:   # --help through the console script
            return work.run(name, cmd=[SCRIPT, "run", "--help"])
        env = {"HYDRA_FULL_ERROR": "1"} if name == "bad_dim_sweep" else None
        return work.run(name, *args, env=env)

    pool = ThreadPoolExecutor(max_workers=3)
    jobs: dict[str, Future] = {name: pool.submit(job, name, args) for name, args in plan.items()}
    yield jobs
    work.closed = True
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in work.procs:      # a test run cut short (-x, -k) need not wait for the rest
        if proc.p.poll() is None:
            proc.kill()


def finished(background, name: str) -> Result:
    """The result of a background command, once it has finished."""
    return background[name].result()


# --------------------------------------------------------------------------- reading runs

def read_metrics(path: Path) -> dict[str, list]:
    """metrics.csv as columns; an empty cell is None, everything else a float (step an int)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows, f"{path} has no rows"
    cols = {k: [None if r[k] in ("", None) else float(r[k]) for r in rows] for k in rows[0]}
    cols["step"] = [int(s) for s in cols["step"]]
    return cols


def summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def at(cols: dict[str, list], key: str) -> dict[int, float]:
    """{step: value} of the rows where ``key`` was logged."""
    return {s: v for s, v in zip(cols["step"], cols[key]) if v is not None}


def snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def ref(work, background) -> Path:
    """The reference run (``CURVE``, seed 0), finished."""
    result = finished(background, "ref")
    assert result.rc == 0, result
    return work.run_dir("ref")


# --------------------------------------------------------------------------- other subcommands
# (first in the module: one process each, they run while the background pool trains)

def test_info_reports_formats_and_compiled_equals_eager(work):
    assert SCRIPT, "the nvfp4-lab console script is not installed (pip install -e .)"
    out = work.run("info", cmd=[SCRIPT, "info"])
    assert out.rc == 0, out
    assert "formats: nvfp4, mxfp4, fp8_e4m3, fp8_e5m2, bf16" in out.out
    assert "compiled nvfp4 == eager: True" in out.out
    assert "compiled mxfp4 == eager: True" in out.out
    _, sdist, sha = corpus.PYCODE_SDISTS[1]   # the pinned corpora with their checksums
    assert f"{sdist} {sha}" in out.out and corpus.SHAKESPEARE_SHA256 in out.out


def listed_commands(text: str) -> list[str]:
    return re.findall(r"^  ([a-z-]+)  +\S", text, re.M)


def test_unknown_subcommand_fails_and_lists_the_available_ones(work):
    out = work.run("unknown", cmd=[*MODULE, "trian"])
    assert out.rc == 2
    assert "unknown subcommand 'trian'" in out.err
    assert listed_commands(out.err)[:3] == ["run", "prepare-data", "info"]


def test_top_level_help_lists_every_subcommand(work):
    from nvfp4_lab.cli import COMMANDS

    out = work.run("top_help", cmd=[SCRIPT, "--help"])
    assert out.rc == 0 and not out.err, out
    assert listed_commands(out.out) == list(COMMANDS)      # each once, with its line
    assert "Configuration groups" not in out.out            # not the Hydra help of run


# --------------------------------------------------------------------------- one run

def test_plain_progress_shows_the_newest_validation(ref, background):
    """A plain line at a validation step shows that validation's loss, later lines keep it
    with the step it was measured at."""
    shown_at = {int(m[1]): (float(m[2]), int(m[3] or m[1])) for m in re.finditer(
        r"^step (\d+)/\d+  train_loss \S+  val_loss (\d+\.\d+)(?: @(\d+))?  ",
        finished(background, "ref").out, re.M)}
    printed = {step: value for step, (value, _) in shown_at.items()}
    val = at(read_metrics(ref / "metrics.csv"), "val_loss")
    assert set(range(EVERY, STEPS + 1)) <= set(printed)
    out = finished(background, "ref")
    assert "threads: 1 (1 core)\n" in out.out                         # OMP_NUM_THREADS=1
    for banner in ("GPU available", "TPU available", "litlogger", "LeafSpec", "fit` stopped"):
        assert banner not in out.text, banner                           # plain mode: quiet
    for step, shown in printed.items():
        newest = max(s for s in val if s <= step)
        assert shown == pytest.approx(val[newest], abs=1e-4), (step, shown, val)
        assert shown_at[step][1] == newest, (step, shown_at[step])     # "@4" unless new
    lines = re.findall(r"^step \d+/\d+ .*$", out.out, re.M)
    assert all(re.search(r"  eta \d+(s|m\d\ds)$", line) for line in lines), lines  # no sweep


def logged(run: Path) -> list[str]:
    """The messages of a run's cli.log, without their time and logger."""
    return [re.sub(r"^\[[^]]*\]\[[^]]*\] ", "", line)
            for line in (run / "cli.log").read_text().splitlines()]


def test_the_run_log_holds_what_the_terminal_showed(ref, background, work):
    """Every line the terminal showed is in the run's cli.log, in order; with a rich bar on the
    terminal instead, cli.log still holds one plain line per logged interval."""
    shown = finished(background, "ref").out.splitlines()
    log = logged(ref)
    assert [line for line in log if line in shown] == shown, (shown, log)
    assert sum(line.startswith("step ") for line in shown) == STEPS // 1   # log_every=1
    rich = finished(background, "rich_log")
    assert rich.rc == 0, rich
    lines = [line for line in logged(work.run_dir("rich_log")) if line.startswith("step ")]
    assert [line.split()[1] for line in lines] == [f"{s}/8" for s in range(1, 9)], lines
    assert not re.search(r"^step \d+/8  train_loss", rich.out, re.M)    # the bar, not lines


def test_a_rich_bar_run_shows_lightnings_lines_once_and_a_readable_bar(background):
    """With the bar (no quieting): Lightning's lines once each, on stdout, no advert and no
    LeafSpec notice; the bar's tokens whole, its lr in scientific notation, no v_num."""
    rich = finished(background, "rich_log")
    assert rich.rc == 0, rich
    for line in ("GPU available: False", "TPU available: False"):
        assert rich.out.count(line) == 1 and line not in rich.err, rich
    for notice in ("💡", "LeafSpec", "INFO:"):
        assert notice not in rich.text, rich
    bar = " ".join(rich.out.split())          # rich wraps the bar at 80 columns off a terminal
    assert f"tokens: {8 * TOKENS_PER_STEP:,} " in bar, bar
    assert re.search(r" lr: \d\.\de-\d\d ", bar) and "v_num" not in bar, bar


def test_sweep_progress_lines_say_which_job_and_the_time_left(background):
    """The smoke sweep (4 jobs, one at a time): each plain line names its job, in order."""
    out = finished(background, "smoke").out
    jobs = [int(m[1]) for m in re.finditer(r"  eta \S+  \(job (\d+)/4, sweep ~\S+\)$", out,
                                           re.M)]
    assert set(jobs) == {1, 2, 3, 4} and jobs == sorted(jobs), jobs


def test_dry_run_lists_the_sweeps_jobs_in_launch_order(work, background):
    """The smoke sweep's jobs as --dry-run lists them = the job directories Hydra made."""
    smoke = finished(background, "smoke")
    assert smoke.rc == 0, smoke
    out = work.root / "dry_out"
    result = work.run("dry_smoke", "+ablation=smoke", f"output_root={out}", "--dry-run")
    assert result.rc == 0, result
    listed = re.findall(r"^ +(\d+)  quant=(\w+), seed=(\d+) ", result.out, re.M)
    made = sorted((int(d.parent.name.split("_")[0]), d.parent.name.split("=")[1],
                   d.name.split("=")[1]) for d in (work.root / "smoke").glob("*/seed=*"))
    assert [(int(n), q, s) for n, q, s in listed] == made and len(made) == 4
    assert "4 jobs, 1 at a time" in result.out and not out.exists()
    plan = SweepPlan.load(work.root / "smoke")             # what the sweep's jobs read
    assert (plan.parallel, len(plan.jobs)) == (1, 4)
    assert all({f"quant={q}", f"seed={s}"} <= set(job.overrides)
               for job, (_, q, s) in zip(plan.jobs, made)), plan


def test_dry_run_estimates_from_what_a_run_measured(work):
    """A run files its timing; the same command with --dry-run finds it and estimates the run
    within 25% of what it took. (A batch size of its own: the runs of CURVE share one timing
    key and overwrite each other's entry.)"""
    args = [*work.train_args("timed"), "train.batch_size=2"]
    trained = work.run("timed", *args)
    assert trained.rc == 0, trained
    took = summary(work.run_dir("timed"))["wall_seconds"]
    result = work.run("dry_timed", *[a for a in args if not a.startswith("hydra.run.dir")],
                      f"hydra.run.dir={work.run_dir('dry_timed')}", "--dry-run")
    assert result.rc == 0, result
    m = re.search(rf"^ +0  .* {STEPS}  ~(\d+)s \(reference, measured here\)$", result.out,
                  re.M)
    assert m, result
    assert abs(int(m[1]) - took) <= 0.25 * took + 0.5, (m[1], took)   # +0.5: whole seconds
    assert not work.run_dir("dry_timed").exists()


def test_run_trains_and_writes_a_complete_run_directory(ref, monkeypatch):
    monkeypatch.setenv("NVFP4_LAB_CACHE", str(ref.parents[1] / "lab-cache"))   # the run's (Proc)
    s = summary(ref)
    assert s["status"] == "done" and s["error"] is None, s
    assert s["steps"] == s["max_steps"] == STEPS
    assert s["tokens_per_step"] == TOKENS_PER_STEP
    assert s["tokens"] == STEPS * TOKENS_PER_STEP
    assert (s["quant"], s["backend"], s["seed"]) == ("nvfp4", "reference", 0)
    assert re.fullmatch(r"[0-9a-f]{16}", s["config_hash"])
    assert s["wall_seconds"] > 0 and s["tokens_per_second"] > 0
    data = DataConfig(**OmegaConf.to_container(OmegaConf.load(ref / "config.yaml").data))
    assert s["data_fingerprint"] == load_prepared(prepared_dir(data)).fingerprint

    m = read_metrics(ref / "metrics.csv")
    assert m["step"] == list(range(1, STEPS + 1))       # log_every=1: one row per step
    assert m["tokens"] == [step * TOKENS_PER_STEP for step in m["step"]]
    train = at(m, "train_loss")
    assert sorted(train) == m["step"]                     # a train loss on every logged step
    val = at(m, "val_loss")
    assert sorted(val) == list(range(EVERY, STEPS + 1, EVERY))   # and a val loss where validated
    assert sorted(at(m, "val_bpb")) == sorted(val)
    assert all(math.isfinite(v) for v in [*train.values(), *val.values()])
    # an untrained byte model predicts ~uniformly over 256 bytes; training lowers the loss
    assert abs(train[1] - math.log(256)) < 0.2, train[1]
    assert train[STEPS] < train[1] - 1.0
    assert s["final_val_loss"] == val[STEPS]
    assert s["best_val_loss"] == min(val.values())
    assert s["final_train_loss"] == train[STEPS]
    assert s["final_val_bpb"] == at(m, "val_bpb")[STEPS]

    report = json.loads((ref / "layer_report.json").read_text())
    assert report["backend"] == "reference"
    layers = {row["name"]: row for row in report["layers"]}
    assert {n for n, row in layers.items() if row["quantized"]} == QUANTIZED
    assert HIGH_PRECISION <= set(layers) and not any(layers[n]["quantized"] for n in HIGH_PRECISION)

    import torch
    ckpt = torch.load(ref / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["global_step"] == STEPS

    import yaml
    cfg = yaml.safe_load((ref / "config.yaml").read_text())
    assert cfg["train"]["max_steps"] == STEPS and cfg["quant"]["backend"] == "reference"
    assert list((ref / "logs" / "csv").glob("version_0/metrics.csv"))


def test_tensorboard_events_hold_the_logged_curve(ref):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = list((ref / "logs" / "tb").glob("version_0/events.out.tfevents.*"))
    assert len(events) == 1, events
    acc = EventAccumulator(str(events[0]))
    acc.Reload()
    m = read_metrics(ref / "metrics.csv")
    for key in ("train_loss", "val_loss"):
        logged = [e.value for e in acc.Scalars(key)]
        # TensorBoard stores float32; metrics.csv holds the same float32 values
        assert logged == pytest.approx(list(at(m, key).values()), rel=1e-6, abs=0), key


def test_same_config_and_seed_reproduce_the_curve_bit_for_bit(ref, work, background):
    for name in ("same_seed", "other_seed"):
        result = finished(background, name)
        assert result.rc == 0, result
    a = read_metrics(ref / "metrics.csv")
    b = read_metrics(work.run_dir("same_seed") / "metrics.csv")
    c = read_metrics(work.run_dir("other_seed") / "metrics.csv")
    assert b["train_loss"] == a["train_loss"]     # exact: no tolerance
    assert b["val_loss"] == a["val_loss"]
    assert summary(work.run_dir("same_seed"))["config_hash"] == summary(ref)["config_hash"]

    assert c["step"] == a["step"]
    assert c["train_loss"][0] != a["train_loss"][0]   # other init and batches from step 1 on
    assert sum(x == y for x, y in zip(a["train_loss"], c["train_loss"])) == 0
    assert summary(work.run_dir("other_seed"))["config_hash"] != summary(ref)["config_hash"]


def test_a_killed_run_resumes_to_the_uninterrupted_curve(ref, work):
    run = work.run_dir("killed")
    args = work.train_args("killed")
    first = work.start("killed_1", *args)
    # Speedometer prints "step N/24" after step N; the checkpoint of step 4 is written before
    # step 5 begins, so once "step 5/" is out there is a complete last.ckpt of step >= 4.
    printed: list[int] = []
    while not printed or max(printed) <= EVERY:
        if first.p.poll() is not None:
            pytest.fail("the run ended before it could be killed\n"
                        f"{first.result(first.p.returncode)}")
        if time.monotonic() - first.started > TIMEOUT:
            first.kill()
            pytest.fail(f"no step past {EVERY} in {TIMEOUT} s\n{first.result(-9)}")
        time.sleep(0.02)
        printed = [int(n) for n in re.findall(rf"^step (\d+)/{STEPS}\b", first.output(), re.M)]
    first.kill()

    killed = summary(run)
    assert killed["status"] == "running", "the kill did not land mid-run: " + str(killed)
    assert (run / "checkpoints" / "last.ckpt").exists()
    before = read_metrics(run / "logs" / "csv" / "version_0" / "metrics.csv")
    assert max(int(round(t / TOKENS_PER_STEP)) for t in before["tokens"] if t) < STEPS

    second = work.run("killed_2", *args)       # the very same command line
    assert second.rc == 0, second
    s = summary(run)
    assert s["status"] == "done" and s["steps"] == STEPS and s["tokens"] == STEPS * TOKENS_PER_STEP
    assert s["started"] == killed["started"] < s["finished"]     # the first attempt's start

    # the second attempt really resumed: its own log starts just after a checkpoint
    resumed = read_metrics(run / "logs" / "csv" / "version_1" / "metrics.csv")
    train_steps = [round(t / TOKENS_PER_STEP) for t, loss in
                   zip(resumed["tokens"], resumed["train_loss"]) if loss is not None]
    first_step = min(train_steps)
    assert first_step > EVERY and (first_step - 1) % EVERY == 0, train_steps
    said = f"continuing from {run / 'checkpoints' / 'last.ckpt'} at step {first_step - 1}\n"
    assert said in second.out and said in (run / "cli.log").read_text(), second
    # its speed (and the step time filed for backend=auto) counts the steps it ran itself
    ran = STEPS - (first_step - 1)
    assert s["tokens_per_second"] == pytest.approx(ran * TOKENS_PER_STEP / s["wall_seconds"],
                                                   rel=0.01)

    got, want = read_metrics(run / "metrics.csv"), read_metrics(ref / "metrics.csv")
    assert got["step"] == want["step"]
    for key in ("tokens", "train_loss", "val_loss", "val_bpb", "lr"):
        assert got[key] == want[key], key                   # exact, every step
    assert s["final_val_loss"] == summary(ref)["final_val_loss"]


# --------------------------------------------------------------------------- refusals

@pytest.fixture(scope="module")
def refusals(work, background):
    """Three attempts on the finished ``same_seed`` run: resume=auto (the same config) and
    resume=never together, then another config (seed=1) last; the directory's bytes before
    and after."""
    result = finished(background, "same_seed")
    assert result.rc == 0, result
    run = work.run_dir("same_seed")
    before = snapshot(run)
    procs = {"never": work.start("refuse_never", *work.train_args("same_seed", "resume=never")),
             "auto": work.start("refuse_auto", *work.train_args("same_seed"))}
    results = {k: p.wait() for k, p in procs.items()}
    results["other"] = work.run("refuse_other", *work.train_args("same_seed", "seed=1"))
    return run, before, snapshot(run), results


def test_a_finished_run_directory_is_never_trained_into_again(refusals):
    run, before, after, r = refusals
    assert r["never"].rc == 2, r["never"]
    assert str(run) in r["never"].text and "already holds a run" in r["never"].text, r["never"]
    assert r["auto"].rc == 0, r["auto"]
    assert "already finished" in r["auto"].out, r["auto"]
    assert r["other"].rc == 2, r["other"]
    assert str(run) in r["other"].text and "different config" in r["other"].text, r["other"]
    assert "(seed: 0 there, 1 here)" in r["other"].err, r["other"]     # the keys that differ
    assert "Traceback" not in r["other"].err + r["never"].err

    assert set(after) == set(before)            # nothing added, nothing removed
    results = {k for k in before if not k.startswith(".hydra/")}
    assert {"summary.json", "metrics.csv", "config.yaml", "layer_report.json",
            "checkpoints/last.ckpt"} <= results
    changed = sorted(k for k in results if after[k] != before[k])
    assert not changed, f"a refused attempt rewrote {changed}"


# --------------------------------------------------------------------------- sweeps

def sweep_rows(sweep: Path) -> list[dict]:
    with open(sweep / "sweep_summary.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_a_failed_job_is_recorded_and_the_sweep_goes_on(work, background):
    result = finished(background, "bad_dim_sweep")
    assert result.rc == 1, result
    sweep = work.root / "bad_dim_sweep"
    rows = {r["quant"]: r for r in sweep_rows(sweep)}
    assert set(rows) == {"nvfp4", "bf16"}, rows
    assert rows["nvfp4"]["status"] == "failed" and rows["bf16"]["status"] == "done", rows
    assert rows["nvfp4"]["job"].startswith("0_") and rows["bf16"]["job"].startswith("1_")

    bad = summary(sweep / rows["nvfp4"]["job"])
    assert bad["status"] == "failed"
    # the converter refuses, naming the layer and the dimension, before any step
    assert "blocks.0.attn.qkv" in bad["error"] and "72" in bad["error"], bad["error"]
    assert "16" in bad["error"] and bad["steps"] == 0
    assert rows["nvfp4"]["error"] == bad["error"]
    good = summary(sweep / rows["bf16"]["job"])        # the job after the failure ran in full
    assert good["status"] == "done" and good["steps"] == 2 and good["final_val_loss"] > 0
    assert "1/2 jobs done" in result.text


def test_smoke_ablation_runs_both_recipes(work, background):
    result = finished(background, "smoke")
    assert result.rc == 0, result
    sweep = work.root / "smoke"
    rows = sweep_rows(sweep)
    assert sorted(r["job"] for r in rows) == ["0_quant=bf16/seed=0", "1_quant=bf16/seed=1",
                                              "2_quant=nvfp4/seed=0", "3_quant=nvfp4/seed=1"]
    for row in rows:
        s = summary(sweep / row["job"])
        assert s["status"] == row["status"] == "done", s
        assert s["steps"] == 4 and s["tokens"] == 4 * TOKENS_PER_STEP
        assert float(row["final_val_loss"]) == s["final_val_loss"]
        m = read_metrics(sweep / row["job"] / "metrics.csv")
        assert sorted(at(m, "train_loss")) == [2, 4]    # smoke logs every 2 steps
        report = json.loads((sweep / row["job"] / "layer_report.json").read_text())
        quantized = {r["name"] for r in report["layers"] if r["quantized"]}
        assert quantized == (QUANTIZED if row["quant"] == "nvfp4" else set()), row["quant"]
        if row["quant"] == "bf16":        # says so, rather than naming a backend that idles
            assert (s["backend"], row["backend"]) == ("none", "none")
            assert s["backend_reason"].startswith("nothing quantized: every linear layer runs")
        else:
            assert s["backend"] in ("reference", "compiled")
    assert result.out.count("recipe bf16: nothing quantized, all 9 linear layers in high "
                            "precision") == 2, result.out
    seed0 = [r for r in rows if r["job"].endswith("seed=0")]
    a, b = (read_metrics(sweep / r["job"] / "metrics.csv")["train_loss"] for r in seed0)
    assert a != b   # the recipes really differ


def test_a_sweep_ends_with_its_report_and_the_notebook_runs_on_it(work, background,
                                                                  monkeypatch):
    """The sweep callback wrote report.md, the tables and the figures; the notebook of
    notebooks/ executes on the same sweep (nbclient), so it cannot rot: the sweep laid out as
    the quickstart's in a checkout, the kernel started in its root and in its notebooks/, it
    finds the sweep by itself and shows both figures inline (image/png, not a repr)."""
    result = finished(background, "smoke")
    sweep = work.root / "smoke"
    assert f"report: {sweep / 'report.md'}" in result.text, result
    with open(sweep / "tables" / "final_loss.csv", newline="") as f:
        table = {r["label"]: r for r in csv.DictReader(f)}
    assert list(table) == ["bf16", "nvfp4"]
    for label, row in table.items():
        finals = [float(r["final_val_loss"]) for r in sweep_rows(sweep) if r["quant"] == label]
        assert row["n"] == "2" and float(row["mean"]) == pytest.approx(sum(finals) / 2)
    assert table["bf16"]["verdict"] == "baseline"
    text = (sweep / "report.md").read_text()
    assert "# smoke" in text and "baseline `bf16`" in text
    for name in ("loss", "loss_gap"):
        assert (sweep / "figures" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert f"figures/{name}.png" in text

    checkout = work.root / "checkout"
    copy = checkout / "outputs" / "sweeps" / "quickstart" / "2026-01-01_00-00-00"
    shutil.copytree(sweep, copy, ignore=shutil.ignore_patterns("*.ckpt"))
    (checkout / "notebooks").mkdir()
    monkeypatch.delenv("NVFP4_LAB_SWEEP", raising=False)
    monkeypatch.delenv("MPLBACKEND", raising=False)       # the kernel's own: inline
    for cwd in (checkout, checkout / "notebooks"):
        nb = executed_notebook(cwd)
        for call in ("figures.loss_figure(", "figures.gap_figure("):
            (cell,) = [c for c in nb.cells if call in c.source]
            shown = [o for o in cell.outputs if "image/png" in o.get("data", {})]
            assert len(shown) == 1, (cwd, call, cell.outputs)
        printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                          for o in c.get("outputs", []))
        assert f"{copy}: 4 runs, recipes by quant: ['bf16', 'nvfp4']; skipped: 0" in printed


def executed_notebook(cwd: Path):
    """notebooks/analysis.ipynb executed by a kernel started in ``cwd``."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(REPO / "notebooks" / "analysis.ipynb", as_version=4)
    NotebookClient(nb, timeout=240, kernel_name="python3",
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


# --------------------------------------------------------------------------- config errors

@pytest.mark.parametrize("name, expected", [
    ("bad_key", ["train.max_stepz", "did you mean train.max_steps?"]),
    ("bad_value", ["nvfp5", "quant.format", "bf16, fp8, mxfp4, nvfp4"]),
    ("bad_group", ["quant/nvfp5", "bf16", "fp8", "mxfp4", "nvfp4_base"]),
    ("typo", ["model.d_modle=64", "did you mean model.d_model?", "n_layers"]),
    ("negative_steps", ["train.max_steps=-3 must be >= 1"]),
])
def test_a_bad_override_fails_at_compose_time(work, background, name, expected):
    result = finished(background, name)
    assert result.rc == 2, result
    assert len(result.err.strip().splitlines()) == 1, result    # one line, the fix in it
    assert "+model" not in result.err and "To append" not in result.err
    for text in expected:
        assert text in result.err, result
    assert "Traceback" not in result.err, result      # a message, not a crash
    assert not work.run_dir(name).exists()            # refused before anything was written


def test_help_lists_the_config_groups_and_the_ablations(background):
    assert SCRIPT, "the nvfp4-lab console script is not installed (pip install -e .)"
    result = finished(background, "help")
    assert result.rc == 0, result
    groups = dict(re.findall(r"^(\w+): (.+)$", result.out.split("== Configuration groups ==")[1]
                             .split("Ablations: ")[0], re.M))
    expected = sorted(d.name for d in CONF.iterdir() if d.is_dir() and any(d.glob("*.yaml")))
    assert {"model", "quant", "data", "logger", "ablation"} <= set(expected)
    assert set(groups) == set(expected), result          # no data folders posing as groups
    for group in expected:
        listed = {o.strip() for o in groups.get(group, "").split(",")}
        assert listed == {p.stem for p in (CONF / group).glob("*.yaml")}, (group, result)
    assert "+ablation=NAME" in result.out and "--cfg job" in result.out
    assert len(result.out.splitlines()) < 40 and "rope_theta" not in result.out   # no dump
