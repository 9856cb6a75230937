"""The ``run`` task: one composed config in, one trained and summarised run directory out.

``train(cfg, out)`` is what Hydra's ``@hydra.main`` calls (``cli.py``), once per job of a
sweep. In order: apply the ablation arm and turn the config into plain dataclasses (so a bad
value fails before anything is written); decide from ``rundir.check_can_start`` whether this
is a new run, a resume from ``checkpoints/last.ckpt`` or a finished run to leave alone; prepare
the data; build the Lightning module and trainer; fit; merge the logs into ``metrics.csv``;
write ``summary.json``.

A failure is recorded, never lost: ``summary.json`` gets ``status: failed`` (or ``diverged``
for NaN/Inf, with the step and layer) and the error; the checkpoint of the last good step stays.
In a sweep the failed job returns normally so that the sweep goes on; the sweep callback counts
it and the command exits non-zero at the end.
"""
from __future__ import annotations

import dataclasses
import time
import traceback
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger, WandbLogger
from omegaconf import DictConfig, OmegaConf

from .. import rundir
from ..config import branch, wandb_check
from ..config.job import Job
from ..config.schema import Refused, TrainConfig, TrainerConfig, apply_arm, process_rank
from ..console import adopt_lightning_log, say
from ..data import LMDataModule
from ..sweep import threads
from ..sweep.machine import Machine, versions
from . import wandb_log
from .auto_backend import AutoBackend, Used
from .module import LMTask, NonFiniteError
from .progress import SweepPosition, progress_callbacks, quiet_lightning, wants_rich


def train(cfg: DictConfig, out: Path, *, multirun: bool = False,
          position: SweepPosition | None = None) -> rundir.Summary:
    """Train one job into ``out``; ``position``: where the job stands in its sweep (its
    plan: the jobs running at once, the cores they share, the progress lines' estimates)."""
    raw, cfg = cfg, apply_arm(cfg)
    job = Job.of_arm(cfg)
    job.trainer.check_launch(multirun)
    if why := wandb_check.refusal(job.logger):
        raise Refused(why)
    world = job.trainer.world_size()
    start = rundir.check_can_start(out, cfg, world=world, tokens_per_step=job.tokens_per_step)
    if start == rundir.Start.done:
        # the terminal only: a finished run's cli.log is not appended to
        print(f"{out}: already finished (summary.json status=done); nothing to do")
        return rundir.Summary.read(out)
    fork = branch.find(raw, cfg, position and position.dir, job.branch_step,  # before any write
                       job.max_steps)
    run = _Run.begin(cfg, job, out, start, fork, position)
    try:
        run.fit(raw, start, multirun, position)
        status, error = rundir.Status.done, None
    except NonFiniteError as err:
        status, error = rundir.Status.diverged, str(err)
    except Exception as err:    # recorded, then re-raised outside a sweep
        status, error = rundir.Status.failed, f"{type(err).__name__}: {err}"
        if not multirun and job.trainer.world_size() == 1:
            run.finish(status, error)
            raise
    if status != rundir.Status.done and job.trainer.world_size() > 1:
        # every rank stops: name the first that failed (RecordRankError), not the
        # connection errors of those that lost it
        first = rundir.RankError.first(out, run.since) or \
            rundir.RankError(process_rank(), status, error)
        run.finish(first.status, str(first))
        raise rundir.RankFailed(f"{first} (every rank stopped; tracebacks in {out}/errors)")
    summary = run.finish(status, error)
    if status == rundir.Status.diverged and not multirun:
        raise NonFiniteError(error)
    return summary


@dataclasses.dataclass
class _Run:
    """One run while it trains: what its summary is written from, when it ends or fails
    (``task`` and ``auto`` stay None where it failed before making them)."""

    out: Path
    job: Job
    base: rundir.Summary
    fork: branch.Branch | None
    wall: float = dataclasses.field(default_factory=time.perf_counter)
    since: float = dataclasses.field(default_factory=time.time)
    task: LMTask | None = None
    auto: AutoBackend | None = None
    wandb: WandbLogger | None = None

    @classmethod
    def begin(cls, cfg: DictConfig, job: Job, out: Path, start: rundir.Start,
              fork: branch.Branch | None, position: SweepPosition | None) -> _Run:
        """Sets the threads; rank 0 writes the resolved config and a ``running`` summary
        (a resumed run keeps its first attempt's ``started``)."""
        rank0 = process_rank() == 0     # with several processes only rank 0 writes
        out.mkdir(parents=True, exist_ok=True)
        if rank0:
            OmegaConf.save(cfg, out / "config.yaml", resolve=True)
        tr = job.trainer
        cpu_procs = tr.world_size() // tr.num_nodes if tr.accelerator == "cpu" else 1
        plan = threads.apply(tr.threads, (position.parallel if position else 1) * cpu_procs,
                             position.plan.cores if position and position.plan else None)
        base = rundir.Summary(
            status=rundir.Status.running, quant=job.recipe.name, arm=job.arm, seed=job.seed,
            model=job.model.name, max_steps=job.max_steps, tokens_per_step=job.tokens_per_step,
            config_hash=job.config_hash, git_sha=rundir.git_sha(),
            code_sha256=rundir.code_sha256(), device=_device_name(tr),
            machine_class=str(Machine.here().cls), versions=versions(),
            started=_first_started(out, start), branched_from=fork and fork.record())
        if rank0:
            say(str(plan))
            base.write(out)
        return cls(out, job, base, fork, wandb=wandb_log.logger(
            job.logger, cfg, out, base.started, position and position.dir))

    def fit(self, raw: DictConfig, start: rundir.Start, multirun: bool,
            position: SweepPosition | None) -> None:
        """Data, module, trainer; fit from step 0, ``last.ckpt`` or the branch point."""
        job, out, seed = self.job, self.out, self.base.seed
        t = job.train
        L.seed_everything(seed, workers=True, verbose=False)
        dm = LMDataModule(job.data, seq_len=t.seq_len, batch_size=t.batch_size, seed=seed,
                          val_batches=t.val_batches)
        dm.prepare_data()
        dm.setup("fit")
        self.base = dataclasses.replace(self.base, data_fingerprint=dm.fingerprint)
        model = job.sized_model(dm.vocab_size)
        task = self.task = LMTask(model, job.recipe, t, seed=seed, max_steps=job.max_steps,
                                  tokens_per_step=job.tokens_per_step,
                                  bytes_per_token=dm.bytes_per_token)
        self.auto = AutoBackend(job.recipe, model, job.tokens_per_step, job.max_steps)
        trainer = _trainer(job.trainer, t, out, job.max_steps, job.tokens_per_step, multirun,
                           position, [self.auto, SaveForBranches(
                               out, branch.save_steps(raw, job.max_steps))],
                           [self.wandb] if self.wandb else [])
        resume = out / "checkpoints" / "last.ckpt" if start == rundir.Start.resume else None
        trainer.fit(task, datamodule=dm,
                    ckpt_path=resume or (self.fork.checkpoint if self.fork else None))
        if task.start_step >= job.max_steps:
            # resumed from the last step's checkpoint, written before that step's validation
            # (a pre-emption in between): Lightning's fit ends at once, so evaluate it here
            trainer.validate(task, datamodule=dm, verbose=False)
        if trainer.is_global_zero and task.report is not None:
            task.report.save(out / "layer_report.json")

    def finish(self, status: rundir.Status, error: str | None) -> rundir.Summary:
        """Rank 0 merges the logs and writes the final ``summary.json``."""
        if process_rank() != 0:
            return self.base
        out, task, tokens_per_step = self.out, self.task, self.job.tokens_per_step
        df = rundir.merge_metrics(out, tokens_per_step, self.fork.prefix() if self.fork else None)
        val = df["val_loss"].dropna() if "val_loss" in df else []
        bpb = df["val_bpb"].dropna() if "val_bpb" in df else []
        trained = df.dropna(subset=["train_loss"]) if "train_loss" in df else df.iloc[:0]
        # the trainer's count: a run shorter than train.log_every logs no row but trained
        steps = max(int(trained["step"].max()) if len(trained) else 0,
                    int(task.global_step) if task is not None else 0)
        seconds = time.perf_counter() - self.wall
        # what this process trained: a resumed run's wall time covers only its own steps
        run_here = steps - (task.start_step if task is not None else 0)
        used = self.auto.used() if self.auto is not None else Used(None, None)
        summary = dataclasses.replace(
            self.base, status=status, error=error,
            final_val_loss=float(val.iloc[-1]) if len(val) else None,
            best_val_loss=float(val.min()) if len(val) else None,
            final_val_bpb=float(bpb.iloc[-1]) if len(bpb) else None,
            final_train_loss=_last(df, "train_loss"), steps=steps,
            tokens=steps * tokens_per_step, wall_seconds=round(seconds, 2),
            tokens_per_second=round(run_here * tokens_per_step / seconds, 1) if seconds
            else None,
            backend=used.backend, backend_reason=used.reason,
            finished=time.strftime("%Y-%m-%dT%H:%M:%S"))
        if status == rundir.Status.done and self.auto is not None:
            self.auto.record(df, self.wall)
        summary.write(out)
        if self.wandb is not None:
            wandb_log.close(self.wandb, summary)
        say(f"{out}: {status.value}" + (f" ({error})" if error else "")
            + (f", val loss {summary.final_val_loss:.4f}" if summary.final_val_loss else ""))
        return summary


def _first_started(out: Path, start: rundir.Start) -> str:
    """Now, or for a resume the time its first attempt started."""
    before = rundir.Summary.read(out) if start == rundir.Start.resume else None
    return (before and before.started) or time.strftime("%Y-%m-%dT%H:%M:%S")


def _last(df, col):
    s = df[col].dropna() if col in df else []
    return float(s.iloc[-1]) if len(s) else None


def _device_name(tr: TrainerConfig) -> str:
    if tr.accelerator in ("gpu", "cuda", "auto") and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return f"cpu ({Machine.here().describe()})"


class RecordRankError(Callback):
    """A data-parallel rank's exception, recorded in the run directory before Lightning tears
    the rank down (``rundir.record_rank_error``), so that the rank that failed first is named
    rather than those whose collectives then lost it."""

    def __init__(self, out: Path):
        self.out = out

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if trainer.world_size > 1:
            diverged = isinstance(exception, NonFiniteError)
            error = rundir.RankError(
                trainer.global_rank,
                rundir.Status.diverged if diverged else rundir.Status.failed,
                str(exception) if diverged else f"{type(exception).__name__}: {exception}")
            error.record(self.out, traceback.format_exc())


class SaveForBranches(Callback):
    """Writes ``branch.checkpoint_path(out, N)`` once the run has done N optimizer steps, for
    each N at which an arm branches from this one (``branch.save_steps``)."""

    def __init__(self, out: Path, steps: list[int]):
        self.out, self.todo = out, set(steps)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step       # steps done: first seen right after step N-1's update
        if step in self.todo:
            self.todo.discard(step)
            trainer.save_checkpoint(branch.checkpoint_path(self.out, step))


def _strategy(tr: TrainerConfig):
    """``fsdp``: FSDP2 (``fully_shard``, applied by ``LMTask.configure_model``) through
    Lightning's ModelParallelStrategy, all ranks data parallel, one checkpoint file."""
    if tr.strategy != "fsdp":
        return tr.strategy
    from lightning.pytorch.strategies import ModelParallelStrategy
    return ModelParallelStrategy(data_parallel_size=tr.world_size(), tensor_parallel_size=1,
                                 save_distributed_checkpoint=False)


def _trainer(tr: TrainerConfig, t: TrainConfig, out: Path, max_steps: int,
             tokens_per_step: int, multirun: bool, position: SweepPosition | None,
             run_callbacks: list[Callback], run_loggers: list[Logger]) -> L.Trainer:
    rich = wants_rich(tr.progress, position.parallel if position else 1)
    adopt_lightning_log()
    if multirun or not rich:
        quiet_lightning()
    loggers = [CSVLogger(out / "logs", name="csv"), TensorBoardLogger(out / "logs", name="tb"),
               *run_loggers]
    # no version counter: a run directory moved or copied elsewhere and resumed there still
    # writes last.ckpt (the callback knows only its old path, and would write last-v1.ckpt)
    callbacks = [ModelCheckpoint(dirpath=out / "checkpoints", every_n_train_steps=t.ckpt_every,
                                 save_last=True, save_top_k=0, enable_version_counter=False),
                 *run_callbacks, RecordRankError(out),
                 *progress_callbacks(tr.progress, t.log_every, tokens_per_step, t.val_every,
                                    position)]
    devices, num_nodes = tr.layout()
    return L.Trainer(
        accelerator=tr.accelerator, devices=devices, num_nodes=num_nodes,
        strategy=_strategy(tr), precision=tr.precision, deterministic=tr.deterministic,
        max_steps=max_steps, val_check_interval=t.val_every * t.accumulate,   # in batches
        check_val_every_n_epoch=None,
        accumulate_grad_batches=t.accumulate, use_distributed_sampler=False,
        gradient_clip_val=t.grad_clip or None, log_every_n_steps=t.log_every,
        logger=loggers, callbacks=callbacks, enable_progress_bar=rich,
        enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=out)
