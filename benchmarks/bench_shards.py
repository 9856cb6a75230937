"""Batch assembly from 8 llm.c shards, as a share of nano's BF16 CPU step.

    python benchmarks/bench_shards.py                 # 8 shards of 4M tokens, nano's 16 x 128
    python benchmarks/bench_shards.py --quick         # a smoke run: small shards, few batches
    python benchmarks/bench_shards.py --shipped-step  # the step from step_times.csv, untimed

Writes ``--shards`` synthetic llm.c shards (GPT-2 version 1: uint16 ids below 256, the
vocabulary of the nano runs, so ``data.vocab_size=256`` makes every batch go through the id
check) to a temporary folder, opens them with ``data=shards`` and times ``LMDataModule.batch``
at nano's batch shape (``train.batch_size`` 16 x ``train.seq_len`` 128), windows drawn at
random and in order. The reference is one training step of nano in BF16 autocast on the CPU
(forward, loss, backward, AdamW: benchmarks/bench_step.py's step), timed in the same run, or,
with ``--shipped-step`` (or when timing it fails), the BF16 nano step of
``src/nvfp4_lab/quant/step_times.csv`` for this machine class; the output says which. The
issue's target: batch assembly under 5% of the step. The shards were just written, so they
sit in the page cache: this times assembly, not a cold disk.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from nvfp4_lab.data import DataConfig, LMDataModule

try:  # run as a script from the repository root or as a module
    from bench_kernels import timeit
    from bench_step import build, step_fn
except ImportError:  # pragma: no cover
    from benchmarks.bench_kernels import timeit
    from benchmarks.bench_step import build, step_fn

TARGET = 0.05
VOCAB = 256            # the nano runs' vocabulary (bytes), as step_times.csv's nano rows


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="smoke run: shards of 50k tokens, 20 batches, one timed step")
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--tokens", type=int, help="tokens per shard (default 4M; quick: 50k)")
    p.add_argument("--batch", type=int, default=16, help="nano's train.batch_size")
    p.add_argument("--seq", type=int, default=128, help="nano's train.seq_len")
    p.add_argument("--batches", type=int, help="batches timed per order (default 500; "
                                               "quick: 20)")
    p.add_argument("--reps", type=int, help="steps timed (default 10; quick: 1)")
    p.add_argument("--shipped-step", action="store_true",
                   help="take the step time from step_times.csv instead of timing one")
    args = p.parse_args()
    args.tokens = args.tokens or (50_000 if args.quick else 4_000_000)
    args.batches = args.batches or (20 if args.quick else 500)
    args.reps = args.reps or (1 if args.quick else 10)
    return args


def write_shards(folder: Path, n: int, tokens: int) -> None:
    """``n`` llm.c training shards and one validation shard of random ids below VOCAB."""
    rng = np.random.default_rng(0)
    names = [f"bench_train_{i:06d}.bin" for i in range(n)] + ["bench_val_000000.bin"]
    for name in names:
        header = np.zeros(256, np.int32)
        header[:3] = 20240520, 1, tokens
        with open(folder / name, "wb") as f:
            f.write(header.tobytes())
            f.write(rng.integers(0, VOCAB, tokens, dtype=np.uint16).tobytes())


def batch_ms(folder: Path, order: str, args) -> float:
    """Median milliseconds of one ``LMDataModule.batch`` over ``args.batches`` steps."""
    cfg = DataConfig(source="shards", path=str(folder), train="bench_train_*.bin",
                     val="bench_val_*.bin", vocab_size=VOCAB, order=order)
    dm = LMDataModule(cfg, seq_len=args.seq, batch_size=args.batch, seed=0, val_batches=1)
    dm.setup("fit")
    assert dm.data.train.limit == VOCAB          # the per-batch id check is in the timing
    times = []
    for step in range(args.batches):
        t0 = time.perf_counter()
        dm.batch(step)
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


def step_ms(args) -> tuple[float, str]:
    """(nano's BF16 CPU step in ms, where that number comes from)."""
    if not args.shipped_step:
        try:
            ns = argparse.Namespace(vocab=VOCAB, seq=args.seq, batch=args.batch, device="cpu")
            model, idx = build("nano", ns)
            ms = timeit(step_fn(model, idx, autocast=True), "cpu", 1, args.reps)
            return ms, f"timed here, median of {args.reps} after one warm-up"
        except RuntimeError as err:
            print(f"timing the step failed ({err}); using step_times.csv")
    return shipped_step_ms()


def shipped_step_ms() -> tuple[float, str]:
    from nvfp4_lab.quant.cost import shipped
    from nvfp4_lab.sweep.machine import Machine

    rows = [r for r in shipped() if (r.format, r.model, r.backend) == ("bf16", "nano", "none")]
    here = str(Machine.here().cls)
    row = next((r for r in rows if r.machine_class == here), rows[0])
    return row.ms_per_step, f"step_times.csv, {row.machine_class}"


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_shards(folder, args.shards, args.tokens)
        rows = [(order, batch_ms(folder, order, args)) for order in ("random", "sequential")]
    step, source = step_ms(args)
    print(f"{args.shards} llm.c shards of {args.tokens} tokens; batch {args.batch} x "
          f"{args.seq}; nano BF16 CPU step {step:.1f} ms ({source})")
    print("| order | batch assembly ms | share of the step | under 5% |")
    print("|---|---|---|---|")
    for order, ms in rows:
        print(f"| {order} | {ms:.3f} | {ms / step:.2%} | {'yes' if ms / step < TARGET else 'no'} |")


if __name__ == "__main__":
    main()
