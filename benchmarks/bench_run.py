"""End-to-end training speed per recipe and backend, as a ratio to BF16 in the same run.

    python benchmarks/bench_run.py                         # nano, 40 steps, CPU
    python benchmarks/bench_run.py --model micro --steps 30 --backends compiled

Each row is a real ``nvfp4-lab run`` subprocess (data, forward, backward, optimizer, logging,
validation at the end), so it measures what a user waits for, not the layer alone:

* ``ms / step``: steady state, from the run's own ``tokens_per_second`` log (wall time between
  log intervals), the median over the intervals after the first;
* ``x BF16``: that over the BF16 row's, measured in the same invocation;
* ``start-up s``: what the run itself filed in its timing ledger for ``backend=auto``
  (``quant/cost.py``): the seconds from the task's start to its first step plus the first
  logged interval's excess over steady steps, i.e. self-test, tracing and compiling, without
  the interpreter's imports; the bar for a warm compiled run is 10 s;
* ``wall s``: the whole process, start-up, compilation and validation included.

The compiled backend runs twice against one fresh inductor cache directory: ``cold`` pays
every compile, ``warm`` finds them cached (what every later run on the machine pays). The
difference of the two wall times is about the compile cost. Timings on a shared machine are
noise: run it alone. Record results with machine and date in RESULTS.md.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from nvfp4_lab.quant import cost

SCRIPT = Path(sys.executable).with_name("nvfp4-lab")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="nano")
    p.add_argument("--data", default="shakespeare")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--recipes", default="fp8,mxfp4,nvfp4")
    p.add_argument("--backends", default="reference,compiled")
    p.add_argument("--threads", type=int, default=0, help="trainer.threads (0: the default)")
    return p.parse_args()


def run(args, quant: str, backend: str, out: Path, cache: Path) -> tuple[float, float, float]:
    """(steady ms per step, start-up seconds, wall seconds) of one training run."""
    cmd = [str(SCRIPT), "run", f"model={args.model}", f"data={args.data}", f"quant={quant}",
           f"quant.backend={backend}", f"train.max_steps={args.steps}",
           f"train.log_every={args.log_every}", f"train.val_every={args.steps}",
           f"train.ckpt_every={args.steps}", "trainer.progress=plain",
           f"trainer.threads={args.threads}", f"hydra.run.dir={out}"]
    # the runs' timing ledger goes to the throwaway cache too: a benchmark's cold and warm
    # timings must not teach backend=auto a start-up this machine's real cache does not have
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "NVFP4_LAB_CACHE": str(cache),
           "CI": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    m = pd.read_csv(out / "metrics.csv")
    rates = m["tokens_per_second"].dropna().tolist()[1:]     # the first interval compiles
    tokens_per_step = int(m["tokens"].dropna().iloc[0] / m["step"].dropna().iloc[0])
    # the cache directory is this recipe's alone, so its ledger holds this run's one key
    (timings,) = cost.load(cache / "timings.json").values()
    return 1000 * tokens_per_step / statistics.median(rates), timings[backend].startup_s, wall


def main() -> None:
    args = parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_run_"))
    print(f"# {args.model}, {args.data}, {args.steps} steps, trainer.threads={args.threads}; "
          f"{os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d')}")
    print("| recipe | backend | ms / step | x BF16 | start-up s | wall s |\n"
          "|---|---|---:|---:|---:|---:|", flush=True)
    try:
        base, startup, wall = run(args, "bf16", "reference", tmp / "bf16", tmp / "cache-bf16")
        print(f"| bf16 | - | {base:.0f} | 1.00 | {startup:.1f} | {wall:.0f} |", flush=True)
        for backend in args.backends.split(","):
            for quant in args.recipes.split(","):
                cache = tmp / f"cache-{quant}"
                passes = ("cold", "warm") if backend == "compiled" else ("",)
                for name in passes:
                    ms, startup, wall = run(args, quant, backend,
                                            tmp / f"{quant}-{backend}{name}", cache)
                    label = f"{backend} {name}".strip()
                    print(f"| {quant} | {label} | {ms:.0f} | {ms / base:.2f} | {startup:.1f} "
                          f"| {wall:.0f} |", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
