"""One forward+backward of a stack of QuantLinears per recipe preset, against nn.Linear.

    python benchmarks/bench_quant_linear.py                        # CPU, hidden 512, 4096 tokens
    python benchmarks/bench_quant_linear.py --device cuda --hidden 2048 --tokens 16384

Every layer of the stack is quantized (the presets' high-precision blocks are dropped, so
the cost of one quantized layer is what is measured). Prints one row per (preset, backend):
median milliseconds per step and the ratio to the same stack of nn.Linear in fp32, measured
in the same run. The issue's target on the CPU: NVFP4 full recipe, compiled, <= 2.5x.
Record results in RESULTS.md.
"""
from __future__ import annotations

import argparse
import platform

import torch
from torch import nn

from nvfp4_lab.quant import PRESETS, HighPrecision, QuantLinear, make_backend

try:  # run as a script from the repository root or as a module
    from bench_formats import bench
except ImportError:  # pragma: no cover
    from benchmarks.bench_formats import bench


def stack(hidden: int, layers: int, device: str) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(hidden, hidden, bias=False) for _ in range(layers)]).to(
        device)


def quantized(base: nn.Sequential, recipe, backend) -> nn.Sequential:
    recipe = recipe.replace(high_precision=HighPrecision())
    return nn.Sequential(*[QuantLinear.from_linear(lin, recipe=recipe, name=f"{i}", index=i,
                                                   backend=backend)
                           for i, lin in enumerate(base)])


def step_fn(model: nn.Module, x: torch.Tensor, grad: torch.Tensor):
    def step():
        model.zero_grad(set_to_none=True)
        model(x).backward(grad)
    return step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--device", default="cpu")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--backends", default="compiled")
    p.add_argument("--presets", default=",".join(p for p in PRESETS if p != "bf16"))
    args = p.parse_args()

    base = stack(args.hidden, args.layers, args.device)
    x = torch.randn(args.tokens, args.hidden, device=args.device, requires_grad=True)
    grad = torch.randn(args.tokens, args.hidden, device=args.device)
    t_base = bench(step_fn(base, x, grad), args.device, args.reps)
    print(f"# torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} threads, device {args.device}; {args.layers} layers "
          f"{args.hidden}x{args.hidden}, {args.tokens} tokens")
    print(f"| recipe | backend | ms / step | x nn.Linear fp32 |\n|---|---|---:|---:|\n"
          f"| nn.Linear fp32 (baseline) | - | {t_base:.1f} | 1.00 |")
    for backend_name in args.backends.split(","):
        backend = make_backend(backend_name)
        for name in args.presets.split(","):
            model = quantized(base, PRESETS[name], backend)
            t = bench(step_fn(model, x, grad), args.device, args.reps)
            print(f"| {name} | {backend_name} | {t:.1f} | {t / t_base:.2f} |", flush=True)


if __name__ == "__main__":
    main()
