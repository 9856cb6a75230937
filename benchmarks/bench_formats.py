"""Fake-quantization speed against a same-size tensor copy, eager and compiled.

    python benchmarks/bench_formats.py                   # 4M fp32 values on the CPU
    python benchmarks/bench_formats.py --device cuda --numel 67108864 --dtype bfloat16

Prints one row per (format, backend): median milliseconds and the ratio to ``y.copy_(x)`` on
the same tensor, measured in the same run. The issue's target: compiled NVFP4 and MXFP4
fake-quant within 4x of a copy on a CPU, RHT included. Record results in RESULTS.md.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from nvfp4_lab.formats import QuantSpec, fake_quantize

CASES = {
    "nvfp4 1x16": QuantSpec("nvfp4"),
    "nvfp4 16x16": QuantSpec("nvfp4", block=(16, 16)),
    "nvfp4 1x16 rht16 (axis 0)": QuantSpec("nvfp4", axis=0, rht=16),
    "nvfp4 1x16 sr hw8": QuantSpec("nvfp4", rounding="sr"),
    "mxfp4 1x32": QuantSpec("mxfp4"),
    "mxfp4 1x32 rht32 (axis 0)": QuantSpec("mxfp4", axis=0, rht=32),
    "fp8_e4m3 1x128": QuantSpec("fp8_e4m3", block=(1, 128)),
}


def bench(fn, device: str, reps: int) -> float:
    """Median wall time of fn() in milliseconds, after two warm-up calls."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--numel", type=int, default=1 << 22)
    p.add_argument("--cols", type=int, default=4096)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--backends", default="eager,compiled")
    args = p.parse_args()

    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    x = torch.randn(args.numel // args.cols, args.cols, device=args.device).to(dtype)
    y = torch.empty_like(x)
    copy_ms = bench(lambda: y.copy_(x), args.device, args.reps)
    print(f"# {tuple(x.shape)} {args.dtype} on {args.device} "
          f"({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads), "
          f"torch {torch.__version__}")
    print(f"{'case':32s} {'backend':9s} {'ms':>9s} {'x copy':>8s}")
    print(f"{'copy (baseline)':32s} {'-':9s} {copy_ms:9.2f} {1.0:8.1f}")
    for name, spec in CASES.items():
        for backend in args.backends.split(","):
            ms = bench(lambda s=spec, b=backend: fake_quantize(x, s, backend=b), args.device,
                       args.reps)
            print(f"{name:32s} {backend:9s} {ms:9.2f} {ms / copy_ms:8.1f}", flush=True)


if __name__ == "__main__":
    main()
