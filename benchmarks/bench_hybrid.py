"""The hybrid's training step beside the transformer's at equal parameter count, on the CPU,
and the share of it that goes to the Mamba-2 scan.

    python benchmarks/bench_hybrid.py                       # nano and micro pairs, 1 thread
    python benchmarks/bench_hybrid.py --pairs nano:hybrid_nano --threads 2

Per pair (transformer preset, hybrid preset of the same width; their parameter counts are
printed, within 3% by construction, ``model/presets.py``): one optimizer step as the trainer
takes it on the CPU (``bench_step.step_fn`` without autocast, as ``trainer=cpu`` runs: fp32
activations, loss, backward, AdamW) for the BF16 recipe (nothing converted) and the paper's
NVFP4 recipe on the ``reference`` backend, as a ratio to the transformer's BF16 step measured
in the same run. Then the scan alone: forward and backward of ``ssd_chunked`` at the hybrid's
shapes, times its number of Mamba-2 blocks, as a share of the hybrid's BF16 step; and the same
for ``ssd_recurrent`` (the token loop the chunked form replaces, run in float64 as the tests'
reference). Medians of ``--reps`` after ``--warmup``; results go to RESULTS.md by hand.
"""
from __future__ import annotations

import argparse

import torch

from nvfp4_lab.model import build_model, model_preset
from nvfp4_lab.model.ssd import ssd_chunked, ssd_recurrent
from nvfp4_lab.quant import convert, make_backend, preset

try:  # run as a script from the repository root or as a module
    from bench_kernels import timeit
    from bench_step import step_fn
except ImportError:  # pragma: no cover
    from benchmarks.bench_kernels import timeit
    from benchmarks.bench_step import step_fn


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", default="nano:hybrid_nano,micro:hybrid_micro")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    return p.parse_args()


def step_ms(name: str, recipe: str, idx: torch.Tensor, args) -> tuple[float, int]:
    """(median ms of one training step, non-embedding parameters) of preset ``name``."""
    torch.manual_seed(0)
    model = build_model(model_preset(name, vocab_size=args.vocab, max_seq_len=args.seq))
    if recipe != "bf16":
        convert(model, preset(recipe), backend=make_backend("reference"))
    step = step_fn(model, idx, autocast=False)
    for _ in range(args.warmup):
        step()
    return timeit(step, "cpu", 0, args.reps), model.num_params()


def scan_ms(name: str, fn, args) -> float:
    """Median ms of forward + backward of the scan over every Mamba-2 block of ``name``."""
    c = model_preset(name)
    b, T, H, G = args.batch, args.seq, c.mamba_heads, c.mamba_groups
    x = torch.randn(b, T, H, c.mamba_head_dim, requires_grad=True)
    dt = torch.rand(b, T, H, requires_grad=True)
    A = -torch.rand(H).add(1).requires_grad_()
    B, C = (torch.randn(b, T, G, c.mamba_state, requires_grad=True) for _ in range(2))
    extra = (c.mamba_chunk,) if fn is ssd_chunked else ()
    x_, dt_, A_, B_, C_ = (t if fn is ssd_chunked else t.detach().double().requires_grad_()
                           for t in (x, dt, A, B, C))

    def run():
        fn(x_, dt_, A_, B_, C_, *extra).sum().backward()
    run()
    reps = args.reps if fn is ssd_chunked else 1  # the token loop is slow: one timed call
    return timeit(run, "cpu", 0, reps) * c.pattern.count("M")


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    print(f"# CPU, {args.threads} thread(s); torch {torch.__version__}; batch {args.batch} x "
          f"seq {args.seq}, vocab {args.vocab}; median of {args.reps} steps after "
          f"{args.warmup} warm-up steps")
    print("| model | non-embedding params | recipe | ms / step | x transformer BF16 |\n"
          "|---|---:|---|---:|---:|", flush=True)
    idx = torch.randint(args.vocab, (args.batch, args.seq + 1))
    scans = []
    for pair in args.pairs.split(","):
        transformer, hybrid = pair.split(":")
        base = None
        for name in (transformer, hybrid):
            for recipe in ("bf16", "nvfp4"):
                t, n = step_ms(name, recipe, idx, args)
                base = base or t
                print(f"| {name} | {n:,} | {recipe} | {t:.1f} | {t / base:.2f} |", flush=True)
        hybrid_bf16 = step_ms(hybrid, "bf16", idx, args)[0]
        scans.append((hybrid, hybrid_bf16, scan_ms(hybrid, ssd_chunked, args),
                      scan_ms(hybrid, ssd_recurrent, args)))
    print("\n| hybrid | BF16 step ms | chunked scan ms (fwd+bwd, all blocks) | share of step "
          "| recurrent scan ms | chunked speed-up |\n|---|---:|---:|---:|---:|---:|")
    for hybrid, step, chunked, recurrent in scans:
        print(f"| {hybrid} | {step:.1f} | {chunked:.1f} | {100 * chunked / step:.0f}% | "
              f"{recurrent:.0f} | {recurrent / chunked:.0f}x |")


if __name__ == "__main__":
    main()
