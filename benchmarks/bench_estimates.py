"""How close the time estimates come: the quickstart's --dry-run and its progress lines against
the wall time the sweep took.

    python benchmarks/bench_estimates.py      # the quickstart twice, ~10 minutes on 2 cores

Round 1 is a fresh machine: an empty timing ledger and compile cache (a private
``NVFP4_LAB_CACHE``), so --dry-run has nothing to estimate from and the progress lines learn
as the jobs finish. Round 2 runs the same command again on what round 1 left (ledger and
compile cache), as a user's second sweep does. For each round: --dry-run's total against the
command's wall time (start to exit, the report included), and the sweep figure of the progress
lines (``sweep ~6m12s``) against the time the sweep then really had left, at the first line of
each job and at the quarters of the sweep. The bar (issue 34): within 25%. Run it alone on the
machine: a training beside it measures the training. Record the tables with machine and date
in RESULTS.md.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = Path(sys.executable).with_name("nvfp4-lab")
REPO = Path(__file__).resolve().parents[1]
LINE = re.compile(r"\(job (\d+)/(\d+), sweep ~(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(\?)?\)$")
TOTAL = re.compile(r"^total ~(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)? ", re.M)


def seconds(h, m, s) -> float:
    return 3600 * int(h or 0) + 60 * int(m or 0) + int(s or 0)


def dry_run(args: list[str], env: dict) -> float | None:
    out = subprocess.run([str(SCRIPT), "run", *args, "--dry-run"], capture_output=True,
                         text=True, env=env, check=True).stdout
    m = TOTAL.search(out)
    return seconds(*m.groups()) if m else None


def sweep(args: list[str], env: dict) -> tuple[float, list[tuple[float, int, float, bool]]]:
    """The command's wall seconds and its sweep figures: (time, job, seconds left, guessed)."""
    t0, seen = time.perf_counter(), []
    proc = subprocess.Popen([str(SCRIPT), "run", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    for line in proc.stdout:
        m = LINE.search(line.rstrip())
        if m:
            seen.append((time.perf_counter() - t0, int(m[1]), seconds(*m.groups()[2:5]),
                         bool(m[6])))
    if proc.wait():
        raise SystemExit(f"the sweep failed (rc {proc.returncode})")
    return time.perf_counter() - t0, seen


def samples(wall: float, seen: list) -> list[tuple[str, float, float, bool]]:
    """(when, estimated left, real left, guessed) at each job's first line and the quarters."""
    picked, jobs = [], set()
    for t, job, left, guessed in seen:
        if job not in jobs:
            jobs.add(job)
            picked.append((f"job {job} starts, {t:.0f} s in", left, wall - t, guessed))
    for q in (0.25, 0.5, 0.75):
        t, job, left, guessed = min(seen, key=lambda s: abs(s[0] - q * wall))
        picked.append((f"{q:.0%} of the sweep, {t:.0f} s in", left, wall - t, guessed))
    return picked


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(REPO / "outputs" / "data"),
                   help="a prepared data cache to reuse (data.cache_dir)")
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "NVFP4_LAB_CACHE": f"{tmp}/cache"}
        for rnd in (1, 2):
            cmd = ["+ablation=quickstart", f"hydra.sweep.dir={tmp}/sweep{rnd}",
                   f"output_root={tmp}/out", f"data.cache_dir={args.data}"]
            estimate = dry_run(cmd, env)
            wall, seen = sweep(cmd, env)
            est = "no estimate" if estimate is None else \
                f"{estimate:.0f} s ({estimate / wall - 1:+.0%})"
            print(f"\nround {rnd}: the sweep took {wall:.0f} s; --dry-run said {est}\n")
            print("| when | sweep left, estimated | really | error |\n|---|---:|---:|---:|")
            for when, left, real, guessed in samples(wall, seen):
                print(f"| {when} | {left:.0f} s{' (guessed)' if guessed else ''} | "
                      f"{real:.0f} s | {left / real - 1:+.0%} |")


if __name__ == "__main__":
    main()
