"""How fast the command line answers what needs no training: help, version, typos, bad values.

    python benchmarks/bench_cli.py            # 5 repeats of each, median wall seconds

Each command is the real console script as a subprocess, timed from start to exit; the
baselines, measured in the same run, are a bare interpreter (``python -c pass``) and the import
of torch and Lightning that these answers avoid (config/preflight.py, lazy.py). The bar (issue
34): under a second. Run it alone on the machine: a training beside it measures the training.
Record the table with machine and date in RESULTS.md.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = Path(sys.executable).with_name("nvfp4-lab")
COMMANDS = {
    "python -c pass (baseline)": [sys.executable, "-c", "pass"],
    "import torch, lightning (avoided)": [sys.executable, "-c", "import torch, lightning"],
    "nvfp4-lab --help": [str(SCRIPT), "--help"],
    "nvfp4-lab --version": [str(SCRIPT), "--version"],
    "nvfp4-lab run --help": [str(SCRIPT), "run", "--help"],
    "nvfp4-lab run model.d_modle=64": [str(SCRIPT), "run", "model.d_modle=64"],
    "nvfp4-lab run train.max_steps=-3": [str(SCRIPT), "run", "train.max_steps=-3"],
    "nvfp4-lab run -m train.max_steps=-3,0,5": [str(SCRIPT), "run", "-m",
                                                "train.max_steps=-3,0,5"],
    "nvfp4-lab plot --help": [str(SCRIPT), "plot", "--help"],
}


def wall(cmd: list[str], cwd: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, capture_output=True, cwd=cwd, check=False)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as cwd:      # nothing may be written: checked below
        print("| command | median s | min s |\n|---|---:|---:|")
        for name, cmd in COMMANDS.items():
            times = [wall(cmd, cwd) for _ in range(args.repeats)]
            print(f"| `{name}` | {statistics.median(times):.2f} | {min(times):.2f} |")
        left = list(Path(cwd).iterdir())
    print(f"\nwritten by the commands: {left or 'nothing'}")


if __name__ == "__main__":
    main()
