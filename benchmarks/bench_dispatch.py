"""What one training step of one quantized linear layer launches on a CUDA device, per recipe.

    python benchmarks/bench_dispatch.py              # every recipe of conf/quant, one run
    python benchmarks/bench_dispatch.py --verbose    # and each launch with its count

An estimate: a CPU trace of the CUDA code path (``quant/launches.py``), unconfirmed on a GPU.
One step is a layer's second (the first fills what a run keeps on the device from step to
step), the forward of one ``QuantLinear`` under bf16 autocast and its backward into an
existing weight gradient (the accumulation's add counted), statistics off, the ``triton``
backend as ``quant.backend=auto`` picks it on CUDA (here in Triton's interpreter, on any
machine). A recipe whose operands no kernel covers is marked: the reference computes them, op
by op. The BF16 ``nn.Linear`` row is the same step of the layer a BF16 run keeps. Launches
are Triton kernels, GEMMs, other compute ops and copies (host-to-device ones included);
views, allocations and host-side ops are not. Each GEMM's operand and output dtypes are
listed.
"""
from __future__ import annotations

import argparse
import os
import warnings

import torch

LABEL = "estimate (CPU trace of the CUDA code path; unconfirmed on a GPU)"
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=256,
                   help="tokens per micro-batch (a multiple of every RHT size: 128)")
    p.add_argument("--in-features", type=int, default=384)
    p.add_argument("--out-features", type=int, default=128,
                   help="a multiple of 128 (Quartet II's Dgrad RHT runs along it)")
    p.add_argument("--x-dtype", choices=sorted(DTYPES), default="bf16",
                   help="the layer's input: bf16 after an attention or FFN, fp32 after a norm")
    p.add_argument("--presets", help="comma-separated recipes (default: every conf/quant one)")
    p.add_argument("--backend", choices=("triton", "reference"), default="triton")
    p.add_argument("--verbose", action="store_true", help="list each launch with its count")
    args = p.parse_args()
    from nvfp4_lab.quant.presets import PRESETS  # the config layer: no torch import

    unknown = [n for n in (args.presets or "").split(",") if n and n not in PRESETS]
    if unknown:
        p.error(f"--presets={args.presets}: {', '.join(unknown)} not among {', '.join(PRESETS)}")
    return args


def coverage(recipe) -> str:
    """"kernels", or the operands the reference computes for want of a kernel."""
    import nvfp4_kernels
    from nvfp4_lab.quant import operand_plan

    missing = [op for op, o in operand_plan(recipe).items()
               if o.spec is not None and not nvfp4_kernels.supported(o.spec)]
    return f"reference fallback: {', '.join(missing)}" if missing else "kernels"


def main() -> None:
    args = parse_args()
    # the trace runs on CPU tensors, GPU or not: the kernels in the interpreter (set before
    # they are first imported)
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from nvfp4_lab.quant import PRESETS, QuantLinear, make_backend, preset
    from nvfp4_lab.quant.launches import Kind, linear_step

    x_dtype = DTYPES[args.x_dtype]
    shape = (args.in_features, args.out_features)

    def step(layer):
        return linear_step(layer, args.tokens, x_dtype)

    rows = [("bf16 nn.Linear", "-", step(torch.nn.Linear(*shape, bias=False)))]
    skipped = []
    names = args.presets.split(",") if args.presets else list(PRESETS)
    for name in names:
        recipe = preset(name)
        if recipe.format == "bf16":
            skipped.append(name)
            continue
        layer = QuantLinear(*shape, recipe=recipe, backend=make_backend(args.backend))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the fallback warnings: the coverage column
            rows.append((name, coverage(recipe), step(layer)))
    bf16 = rows[0][2].launches
    print(f"# Launches per linear layer step: {LABEL}")
    print(f"tokens {args.tokens}, in {args.in_features}, out {args.out_features}, x "
          f"{args.x_dtype}, backend {args.backend}; torch {torch.__version__}")
    if skipped:
        print(f"not traced (quantize nothing, the nn.Linear row): {', '.join(skipped)}")
    print("\n| layer | quantizers | triton | gemm | other compute | copies | launches |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, cover, t in rows:
        print(f"| {name} | {cover} | {t.count(Kind.triton)} | {t.count(Kind.gemm)} | "
              f"{t.count(Kind.compute)} | {t.count(Kind.copy)} | {t.launches} |")
    print()
    for name, _, t in rows[1:]:
        print(f"{name}: launches per quantized linear step: {t.launches} "
              f"(bf16 nn.Linear: {bf16}) [{LABEL}]")
    print("\nGEMMs (operands -> output):")
    for name, _, t in rows:
        for op in t.gemms:
            print(f"  {name}: {op.describe()}")
    if args.verbose:
        for name, _, t in rows:
            print(f"\n{name}: each launch, with its count")
            for op, n in sorted(t.names().items(), key=lambda kv: (-kv[1], kv[0])):
                print(f"  {n:4d}  {op}")


if __name__ == "__main__":
    main()
