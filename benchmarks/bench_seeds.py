"""Seed-to-seed spread of the paired gaps between recipes, and on how many seeds an ordering holds.

    python benchmarks/bench_seeds.py                                   # the quickstart, 5 seeds
    python benchmarks/bench_seeds.py --seeds 3 --recipes bf16,nvfp4 -- \\
        model=nano data=shakespeare_bytes train.max_steps=600           # a candidate lab scale

One multirun (``nvfp4-lab run -m``) over recipes x seeds, with ``+ablation=`` (default:
quickstart) and any further overrides after ``--``; then, from the runs' own ``summary.json``,
the paired statistics of ``analysis.inference.stats`` (the ones every report uses):

* per recipe: mean final validation loss over the seeds;
* per adjacent pair of ``--order`` (default bf16 < nvfp4 < mxfp4, the paper's Fig. 6): the
  paired gap in % (per seed, then mean, sd and 95% t interval) and on how many seeds the pair
  is in the paper's order;
* the count of seeds on which the whole ordering holds, and the wall time of the sweep.

This is how the lab scale (results/README.md) and the quickstart (README) were chosen: a scale
can resolve an effect when its paired gap's interval excludes zero, and the sd of the gap says
how many seeds a smaller effect needs. Record results with machine and date in RESULTS.md.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from nvfp4_lab.analysis.findings.claims import claim_gaps
from nvfp4_lab.analysis.inference.stats import mean_ci
from nvfp4_lab.analysis.sources.paper import Claim
from nvfp4_lab.sweep.callback import summarise

SCRIPT = Path(sys.executable).with_name("nvfp4-lab")


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ablation", default="quickstart", help="+ablation= (empty: none)")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--recipes", default="bf16,nvfp4,mxfp4", help="quant= presets swept")
    p.add_argument("--order", default="bf16,nvfp4,mxfp4", help="expected order, best first")
    p.add_argument("--out", type=Path, help="sweep directory to keep (default: a temp dir)")
    return p.parse_args(argv), extra


def sweep(args: argparse.Namespace, extra: list[str], out: Path) -> float:
    """Run the multirun into ``out``; its wall seconds."""
    seeds = ",".join(map(str, range(args.seeds)))
    cmd = [str(SCRIPT), "run", "-m", *([f"+ablation={args.ablation}"] if args.ablation else []),
           f"quant={args.recipes}", f"seed={seeds}", "trainer.progress=plain",
           f"hydra.sweep.dir={out}", *extra]
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"sweep failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def pair_rows(runs: pd.DataFrame, order: list[str]) -> list[dict]:
    """For each adjacent (better, worse) of ``order``: the claim gap of ``better < worse``,
    (better - worse) / better in % (negative = worse is worse, as the claim expects), and the
    seeds in order."""
    rows = []
    for better, worse in zip(order, order[1:]):
        gaps = claim_gaps(runs, Claim(better, worse), "final_val_loss")["gap"]
        ci = mean_ci(gaps)
        rows.append({"pair": f"{better} < {worse}", "seeds": ci.n, "gap_pct": ci.mean,
                     "sd": ci.sd, "ci_lo": ci.lo, "ci_hi": ci.hi,
                     "in_order": int((gaps < 0).sum())})
    return rows


def seeds_in_order(runs: pd.DataFrame, order: list[str]) -> tuple[int, int]:
    """(seeds whose final losses follow ``order`` strictly, seeds with every recipe done)."""
    done = runs[runs["status"] == "done"]
    table = done.pivot_table(index="seed", columns="label", values="final_val_loss")
    table = table.reindex(columns=order).dropna()
    ok = sum(all(row[a] < row[b] for a, b in zip(order, order[1:]))
             for _, row in table.iterrows())
    return ok, len(table)


def main() -> None:
    args, extra = parse_args(sys.argv[1:])
    order = args.order.split(",")
    out = args.out or Path(tempfile.mkdtemp(prefix="bench_seeds_")) / "sweep"
    wall = sweep(args, extra, out)
    runs = summarise(out).rename(columns={"quant": "label"})
    means = runs[runs["status"] == "done"].groupby("label")["final_val_loss"].mean()
    ok, n = seeds_in_order(runs, order)
    print(f"\n# {args.ablation or 'run'} {' '.join(extra)}; {args.seeds} seeds; "
          f"{time.strftime('%Y-%m-%d')}; sweep wall {wall:.0f} s; tokens/run "
          f"{int(runs['tokens'].max()):,}")
    print("final val loss: " + ", ".join(f"{k} {means[k]:.4f}" for k in order if k in means))
    print("| pair a < b | seeds | claim gap (a - b) / a, % | sd | 95% CI | seeds in order |\n"
          "|---|---:|---:|---:|---|---:|")
    for r in pair_rows(runs, order):
        print(f"| {r['pair']} | {r['seeds']} | {r['gap_pct']:+.3f} | {r['sd']:.3f} | "
              f"[{r['ci_lo']:+.3f}, {r['ci_hi']:+.3f}] | {r['in_order']}/{r['seeds']} |")
    print(f"whole ordering {' < '.join(order)} on {ok}/{n} seeds")


if __name__ == "__main__":
    main()
