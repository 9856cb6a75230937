"""The ``nvfp4-lab`` console script: a small dispatcher over subcommands.

    nvfp4-lab run [overrides]           train (a Hydra app: -m, +ablation=NAME, --help,
                                        --dry-run: the jobs and their estimated time)
    nvfp4-lab prepare-data [overrides]  fetch/tokenize the configured corpus (data=...)
    nvfp4-lab info                      versions, devices, backends, conf dir, a self-check
    nvfp4-lab bench [NAME]              run a benchmark from benchmarks/ (checkout only)
    nvfp4-lab plot DIR...               (re)write each sweep's report.md, tables, figures
    nvfp4-lab plot --index results/     rewrite the index, then every published report
    nvfp4-lab publish SWEEP [--to DIR] [--as FOLDER]
                                        copy a finished ablation sweep into results/, report
    nvfp4-lab compare A B ... [--out D] one report over any runs and sweeps
    nvfp4-lab eval DIR... tasks=a,b     lm-eval tasks on each finished run: eval.json
                                        (the eval extra; harness/command.py)

Hydra owns ``sys.argv`` inside ``run``, so the dispatcher pops the subcommand. A first
argument that is an override (``key=value``, ``+key=...``, ``-m``) also means ``run``: when
Lightning re-executes this script for its DDP workers, their argv is the overrides and its own
``hydra.run.dir=...`` (docs/architecture.md, Command line). The command draws its figures
with matplotlib's headless backend unless ``MPLBACKEND`` names another; the library chooses
none, so a notebook shows the same figures inline.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

from .configs import conf_dir, conf_source

REPO = Path(__file__).resolve().parents[2]   # a checkout's root: only ``bench`` needs it
MULTIRUN = frozenset({"-m", "--multirun"})


def shared_run_dir(argv: list[str]) -> list[str]:
    """Under torchrun or srun every rank resolves ``${now:...}`` itself; name the run
    directory after the launcher's job id instead, which all ranks share."""
    job = os.environ.get("TORCHELASTIC_RUN_ID") or (
        os.environ.get("SLURM_JOB_ID") and
        f"slurm-{os.environ['SLURM_JOB_ID']}.{os.environ.get('SLURM_STEP_ID', 0)}")
    if not job or any(a.startswith("hydra.run.dir=") for a in argv) or "-m" in argv:
        return []
    return [f"hydra.run.dir=${{output_root}}/runs/${{name}}/{job}"]


def run(argv: list[str]) -> int:
    """Hydra's ``@hydra.main`` over ``conf/``; one ``train`` (``_job``) per job."""
    import hydra

    from .config import preflight
    from .config.schema import register

    if {"--help", "-h"} & set(argv):
        from .configs import run_help

        print(run_help())
        return 0
    dry_run = "--dry-run" in argv
    # Hydra's parser takes -m only before the overrides; --dry-run is ours
    argv = [a for a in argv if a in MULTIRUN] + [a for a in argv
                                                 if a not in MULTIRUN | {"--dry-run"}]
    hydra_flags = {a for a in argv if a.startswith("-")} - MULTIRUN
    if not hydra_flags and not os.environ.get("HYDRA_FULL_ERROR"):
        problem = preflight.check(argv, dry_run)  # one line, before Hydra writes anything
        if problem:
            return _refused(problem)
    if dry_run:
        print(dry_run_text(argv))
        return 0
    register()
    sys.argv = [sys.argv[0], *argv, *shared_run_dir(argv)]
    app = hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="config")
    try:
        app(_job)()    # a sweep with a failed job ends in SystemExit(1) (sweep/callback.py)
    finally:
        _close_process_group()
    return 0


def _job(cfg) -> None:
    """One job of ``run``, in the process Hydra's launcher gives it. A job that cannot start
    ends in one line, not Hydra's traceback."""
    _quiet_foreign_notices()       # a launcher's worker process never ran main()
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from .config.schema import Refused
    from .rundir import RankFailed, RunExists
    from .sweep.plan import SweepPlan
    from .train.progress import SweepPosition
    from .train.task import train

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    position = SweepPosition(int(hc.job.num), SweepPlan.load(Path(hc.sweep.dir)),
                             Path(hc.sweep.dir)) if multirun else None
    out = Path(hc.runtime.output_dir)
    try:
        train(cfg, out, multirun=multirun, position=position)
    except (Refused, RunExists) as err:   # nothing written: drop Hydra's own log too
        _drop_hydra_log(out)
        raise SystemExit(_refused(err)) from None
    except RankFailed as err:   # the cause is recorded; one line on each rank
        raise SystemExit(f"nvfp4-lab: {err}") from None


def _refused(problem: object) -> int:
    """A user's mistake: one line on stderr, exit status 2."""
    print(f"nvfp4-lab: {problem}", file=sys.stderr)
    return 2


def _drop_hydra_log(out: Path) -> None:
    """Remove the directory Hydra made for a job that never started: its only file is Hydra's
    own log, and its parent folder when that is empty too."""
    if out.is_dir() and all(p.name == "cli.log" for p in out.iterdir()):
        shutil.rmtree(out)
        if out.parent.is_dir() and not any(out.parent.iterdir()):
            out.parent.rmdir()


def _close_process_group() -> None:
    """Destroy a DDP process group before the interpreter exits: left to the exit-time
    destructors, gloo's worker threads can abort the process ("terminate called without an
    active exception", SIGABRT) after a run that succeeded. Without torch loaded (Hydra's
    --help) there is none."""
    if "torch" not in sys.modules:
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def prepare_data(argv: list[str]) -> int:
    """Prepare the corpus of the composed config (``data=...`` overrides); shards and a
    prepared folder are checked."""
    from .config.preflight import composed
    from .config.schema import plain
    from .data import DataConfig, DataUnavailable, prepare

    cfg = composed(argv)
    if isinstance(cfg, str):
        return _refused(cfg)
    try:
        data = plain(cfg.data, DataConfig)
    except (ValueError, TypeError) as err:
        return _refused(err)
    try:
        path = prepare(data)
    except (ValueError, FileNotFoundError, FileExistsError, DataUnavailable) as err:
        return _refused(err)      # ShardError, a dataset's or a tokenizer's mistake
    print(f"prepared: {path}")
    if data.source == "hf":
        from .data.hf_prepare import summary

        print(summary(path))
    return 0


def info(argv: list[str]) -> int:
    """Versions, the accelerator, the backends, the conf dir, an eager-vs-compiled check."""
    print("\n".join(_info_lines()))
    return 0 if "--no-compile" in argv or _compiled_matches_eager() else 1


def _info_lines() -> list[str]:
    import torch

    from . import __version__
    from .data import corpus
    from .formats import FORMATS
    from .quant import packaged
    from .sweep.machine import Machine, versions

    cuda = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    machine = Machine.here()
    try:
        import nvfp4_kernels  # noqa: F401
        triton = "installed" + ("" if torch.cuda.is_available() else " (needs CUDA)")
    except ImportError:
        triton = "not installed"
    return [
        f"nvfp4-lab {__version__}  python {platform.python_version()}  torch {torch.__version__}",
        f"cpu: {machine.describe()}; cuda: {cuda}",
        f"machine class: {machine.cls} with "
        + ", ".join(f"{k} {v}" for k, v in versions().items())
        + " (runs are bit-equal within one class and these versions: README)",
        f"formats: {', '.join(FORMATS)}",
        f"backends: reference, compiled; triton {triton}",
        f"conf: {conf_source().describe()}",
        "corpora (sha256): " + ", ".join(f"{f} {sha}" for f, sha in corpus.pinned_sdists()),
        f"compile cache: {packaged.compile_cache_dir()}"]


def _compiled_matches_eager() -> bool:
    """The compiled quantizers against the eager ones on one random tensor, printed."""
    import torch

    from .formats import QuantSpec, fake_quantize
    from .quant import compiled

    x = torch.randn(64, 256)
    for spec in (QuantSpec("nvfp4"), QuantSpec("mxfp4")):
        same = torch.equal(fake_quantize(x, spec), compiled.fake_quantize(x, spec))
        print(f"compiled {spec.fmt} == eager: {same}")
        if not same:
            return False
    return True


def bench(argv: list[str]) -> int:
    """Run ``benchmarks/bench_<name>.py`` of the checkout (default: quant_linear)."""
    name = argv[0] if argv else "quant_linear"
    script = REPO / "benchmarks" / f"bench_{name}.py"
    if not script.exists():
        found = sorted(p.stem.removeprefix("bench_")
                       for p in (REPO / "benchmarks").glob("bench_*.py"))
        print(f"no benchmark {name!r}; available: "
              f"{', '.join(found) or '(none: not a checkout)'}", file=sys.stderr)
        return 2
    return subprocess.call([sys.executable, str(script), *argv[1:]])


def _analysis_args(prog: str, argv: list[str], out: bool):
    import argparse

    p = argparse.ArgumentParser(prog=f"nvfp4-lab {prog}")
    p.add_argument("paths", nargs="+", help="run dirs, sweep dirs or globs")
    p.add_argument("--baseline", help="the recipe label the others are compared against "
                   "(default: the paper's reference arm, else bf16, else the first)")
    p.add_argument("--ablation", help="whose paper numbers to draw beside ours "
                   "(default: the runs' config name)")
    if out:
        p.add_argument("--out", type=Path, help="report directory "
                       "(default: outputs/compare/<time>)")
    return p.parse_args(argv)


def _report(paths, out, args) -> int:
    from .analysis.reports.report import write_report

    try:
        path = write_report(paths, out, baseline=args.baseline, ablation=args.ablation)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"report: {path}")
    return 0


def plot(argv: list[str]) -> int:
    """Rewrite the report of every sweep at or under each path (a run dir gets its own), or
    with ``--index DIR`` every report published there and the index of them all."""
    if argv and argv[0] == "--index":
        return _index(argv[1:])
    args = _analysis_args("plot", argv, out=False)
    from .analysis.sources.collect import find_sweeps  # pandas, after --help has answered

    rc = 0
    for path in args.paths:
        for sweep in find_sweeps(path):
            rc = max(rc, _report([sweep], sweep, args))
    return rc


def compare(argv: list[str]) -> int:
    """One report over all the given runs and sweeps."""
    import datetime as dt

    args = _analysis_args("compare", argv, out=True)
    out = args.out or Path("outputs/compare") / f"{dt.datetime.now():%Y-%m-%d_%H-%M-%S}"
    return _report(args.paths, out, args)


def _index(argv: list[str]) -> int:
    """The index (which writes the claims the reports quote), then every published report."""
    from .analysis.reports.index import write_index
    from .analysis.reports.publish import redraw

    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(f"error: --index takes one results directory, got {' '.join(argv) or 'none'}",
              file=sys.stderr)
        return 2
    try:
        index = write_index(Path(argv[0]))
        changed = redraw(Path(argv[0]))
        print(f"index: {index}\nreports: {len(changed)} redrawn, {sum(changed.values())} changed")
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def publish(argv: list[str]) -> int:
    """Copy a finished ablation sweep's run files into ``results/<ablation>/`` (a study's
    finished runs, as it grows), draw its report there (PNG figures only) and rewrite the
    index."""
    import argparse

    p = argparse.ArgumentParser(prog="nvfp4-lab publish")
    p.add_argument("sweep", type=Path, help="a finished sweep directory (multirun.yaml)")
    p.add_argument("--to", type=Path, default=Path("results"), help="results directory")
    p.add_argument("--as", dest="folder", default=None,
                   help="the folder under --to (default: the sweep's name; a design-v2 sweep: "
                        "v2/<name>_<model>)")
    args = p.parse_args(argv)
    from .analysis.reports.index import write_index  # pandas, after --help has answered
    from .analysis.reports.publish import draw
    from .analysis.reports.publish import publish as copy_sweep

    try:
        dest = copy_sweep(args.sweep, args.to, args.folder)
        draw(dest, args.to)
        print(f"published: {dest}\nindex: "
              f"{write_index(args.to)}")
    except (FileNotFoundError, FileExistsError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def dry_run_text(argv: list[str]) -> str:
    """``run --dry-run``: the jobs and their cost (``sweep.preview``), then what the lab's
    published results say the ablation's claims need, priced here
    (``analysis.findings.context``)."""
    from .analysis.findings.context import plan_lines, shipped
    from .analysis.sources.paper import load_paper
    from .sweep.preview import preview

    dry = preview(argv)
    paper = load_paper(dry.name)
    lines = plan_lines(paper, shipped(), dry.seconds_per_seed) if paper else []
    return "\n".join([dry.text, *lines])


def evaluate(argv: list[str]) -> int:
    """Score finished runs on lm-eval tasks into their ``eval.json``."""
    from .harness.command import evaluate as score

    return score(argv)


COMMANDS = {"run": run, "prepare-data": prepare_data, "info": info, "bench": bench,
            "plot": plot, "compare": compare, "publish": publish, "eval": evaluate}


SUMMARY = {
    "run": "train one configuration or a sweep (Hydra overrides; run --help: groups, ablations)",
    "prepare-data": "fetch and tokenize the configured corpus (data=...)",
    "info": "versions, devices, backends, the conf dir, an eager-vs-compiled check",
    "bench": "run a benchmark from benchmarks/ (a checkout only)",
    "plot": "rewrite each sweep's report.md, tables and figures; --index results/",
    "compare": "one report over any runs and sweeps",
    "publish": "copy a finished ablation sweep (a study: its finished runs) into results/",
    "eval": "score finished runs on lm-eval tasks (the eval extra) into each eval.json",
}


# the arguments of the subcommands that have no parser of their own, for their --help
ARGS = {
    "prepare-data": "[data=NAME] [data.KEY=VALUE ...]   the corpus of the composed config",
    "info": "[--no-compile]   --no-compile: skip the eager-vs-compiled check",
    "bench": "[NAME [ARGS ...]]   NAME: {benchmarks} (default quant_linear)",
    "eval": "RUN_OR_SWEEP... tasks=NAME[,NAME] [limit=N] [forward=quantized|bf16] "
            "[batch_size=N] [include=DIR] [--overwrite]",
}


def version() -> str:
    """``nvfp4-lab 0.1.0 (python 3.11.7, torch 2.13.0, lightning 2.6.6, hydra-core 1.3.8)``,
    without importing any of them."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as of

    from . import __version__

    def v(name: str) -> str:
        try:
            return of(name)
        except PackageNotFoundError:
            return "not installed"
    return (f"nvfp4-lab {__version__} (python {platform.python_version()}, "
            + ", ".join(f"{n} {v(n)}" for n in ("torch", "lightning", "hydra-core")) + ")")


def command_help(name: str) -> str:
    benchmarks = ", ".join(sorted(p.stem.removeprefix("bench_") for p in
                                  (REPO / "benchmarks").glob("bench_*.py"))) or "none here"
    details = []
    if name == "prepare-data":
        from .data.config import help_lines

        details = ["", *help_lines()]
    return "\n".join([f"usage: nvfp4-lab {name} {ARGS[name].format(benchmarks=benchmarks)}",
                      "", f"  {SUMMARY[name]}", *details])


def usage() -> str:
    width = max(map(len, COMMANDS))
    return ("usage: nvfp4-lab COMMAND [ARGS]   (a first argument key=value means run)\n\n"
            + "\n".join(f"  {name:<{width}}  {SUMMARY[name]}" for name in COMMANDS)
            + "\n\n  nvfp4-lab run +ablation=quickstart        the README's first command")


HEADLESS = "Agg"    # the command line only writes figures to files


def _quiet_foreign_notices() -> None:
    """Silence a notice meant for Lightning's developers, not our users: Lightning's pytree
    helper builds torch's ``LeafSpec``, which torch deprecated (a FutureWarning on every
    run). Only that message from that module: any other warning still shows."""
    warnings.filterwarnings(
        "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        category=FutureWarning, module=r"lightning\.pytorch\.utilities\._pytree")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _quiet_foreign_notices()
    os.environ.setdefault("MPLBACKEND", HEADLESS)   # a user's own choice stands
    if argv and argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if argv and (argv[0] in ("-V", "--version") or argv[:2] == ["run", "--version"]):
        print(version())
        return 0
    if argv and argv[0] in ARGS and {"-h", "--help"} & set(argv[1:]):
        print(command_help(argv[0]))
        return 0
    if argv and argv[0] in COMMANDS:
        return COMMANDS[argv[0]](argv[1:])
    if argv and ("=" in argv[0] or argv[0].startswith(("+", "-"))):
        return run(argv)
    got = f"unknown subcommand {argv[0]!r}\n" if argv else ""
    print(f"{got}{usage()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
