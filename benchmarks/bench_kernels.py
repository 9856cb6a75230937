"""Quantization kernels' effective bandwidth against a device-to-device copy, same run.

    python benchmarks/bench_kernels.py                  # CUDA: bf16 8192 x 8192 (64M values)
    python benchmarks/bench_kernels.py --quick          # CUDA: 2048 x 2048
    python benchmarks/bench_kernels.py --quick --cpu    # CPU smoke: Triton's interpreter, 64 x 256

For each quantizer a GEMM operand can need, times ``nvfp4_kernels.operand`` (the ``triton``
backend) and, for a few, ``fake_quantize_parts(..., backend="compiled")`` (torch.compile of the
reference; its compile time is printed apart). A kernel reads the bf16 input and writes the
fp32 ``local``, so its effective bandwidth is (2 + 4) bytes per value / time, whatever passes
it makes (NVFP4 and per-tensor FP8 read x twice: their ceiling is 6/8 of a copy's). The
baseline is ``torch.empty_like(buf).copy_(buf)`` of a buffer holding half those bytes (a copy
reads and writes it: the same bytes moved), timed in the same run. The issue's target on an
H100/H200: quantize kernels >= 60 % of copy bandwidth on tensors of >= 64M values.

Every triton result is also compared with the eager reference, bit for bit (``exact``), and a
spec no kernel covers says ``reference`` (the dispatcher computes it with the reference).
Timing: CUDA events around each call, median of ``--reps`` after ``--warmup`` calls; on the
CPU, wall time. Record results in RESULTS.md.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from importlib.metadata import version

import torch

from nvfp4_lab.formats import QuantSpec, Stream, fake_quantize_parts

CASES = {
    "nvfp4 1x16": QuantSpec("nvfp4"),
    "nvfp4 1x16 sr": QuantSpec("nvfp4", rounding="sr"),
    "nvfp4 1x16 axis 0": QuantSpec("nvfp4", axis=0),
    "nvfp4 1x16 axis 0 sr": QuantSpec("nvfp4", axis=0, rounding="sr"),
    "nvfp4 1x16 axis 0 rht16 sr (Wgrad dY)": QuantSpec("nvfp4", axis=0, rounding="sr", rht=16),
    "nvfp4 16x16": QuantSpec("nvfp4", block=(16, 16)),
    "nvfp4 16x16 sr": QuantSpec("nvfp4", block=(16, 16), rounding="sr"),
    "mxfp4 1x32": QuantSpec("mxfp4"),
    "mxfp4 1x32 sr": QuantSpec("mxfp4", rounding="sr"),
    "fp8_e4m3 1x128": QuantSpec("fp8_e4m3", block=(1, 128)),
    "fp8_e4m3 1x128 axis 0": QuantSpec("fp8_e4m3", block=(1, 128), axis=0),
    "fp8_e4m3 128x128": QuantSpec("fp8_e4m3", block=(128, 128)),
    "fp8_e4m3 per tensor": QuantSpec("fp8_e4m3", block=None),
}
# the cases also timed with the compiled backend unless --compiled says otherwise: one
# compile each (tens of seconds on a fresh machine)
FEW_COMPILED = ("nvfp4 1x16", "nvfp4 16x16", "mxfp4 1x32", "fp8_e4m3 1x128")
STREAM = Stream(layer=1, step=2, gemm=0, operand=1)


def timeit(fn, device: str, warmup: int, reps: int) -> float:
    """Median milliseconds of fn() over ``reps`` calls after ``warmup`` calls: CUDA events on
    a GPU, wall time on the CPU."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(torch.int32), b.view(torch.int32))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small tensor, few repetitions")
    p.add_argument("--cpu", action="store_true",
                   help="run on the CPU in Triton's interpreter (a smoke test; CPU timing)")
    p.add_argument("--rows", type=int, help="default 8192 (quick: 2048 on CUDA, 64 on CPU)")
    p.add_argument("--cols", type=int, help="default 8192 (quick: 2048 on CUDA, 256 on CPU)")
    p.add_argument("--warmup", type=int, help="default 3 (quick: 1)")
    p.add_argument("--reps", type=int, help="default 20 (quick: 3)")
    p.add_argument("--compiled", choices=["none", "few", "all"],
                   help="cases also timed with the compiled backend (default: few on CUDA, "
                        "none with --cpu)")
    p.add_argument("--cases", help="comma-separated case names (default: all)")
    args = p.parse_args()
    small = (64, 256) if args.cpu else (2048, 2048)
    rows, cols = small if args.quick else (8192, 8192)
    args.rows, args.cols = args.rows or rows, args.cols or cols
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    args.reps = args.reps or (3 if args.quick else 20)
    args.compiled = args.compiled or ("none" if args.cpu else "few")
    args.device = "cpu" if args.cpu else "cuda"
    return args


def header(args, x: torch.Tensor) -> str:
    where = (torch.cuda.get_device_name() if args.device == "cuda"
             else f"CPU ({platform.processor() or platform.machine()}, Triton interpreter)")
    return (f"# {where}; torch {torch.__version__}, triton {version('triton')}; x: "
            f"{x.dtype} {tuple(x.shape)} = {x.numel():,} values; median of "
            f"{args.reps} after {args.warmup} warm-up calls")


def operand_fn(kernels, x: torch.Tensor, spec: QuantSpec, backend: str):
    """fn() computing x's operand for ``spec`` with the triton kernels or the compiled
    reference."""
    if backend == "triton":
        return lambda: kernels.operand(x, spec, seed=7, stream=STREAM)
    return lambda: fake_quantize_parts(x, spec, seed=7, stream=STREAM, backend="compiled")


def row(name: str, backend: str, t: float, moved: int, t_copy: float, exact: str) -> str:
    return (f"| {name} | {backend} | {t:.3f} | {moved / t / 1e6:.4g} | "
            f"{100 * t_copy / t:.3g} | {exact} |")


def main() -> None:
    args = parse_args()
    if args.cpu:
        os.environ["TRITON_INTERPRET"] = "1"  # before the kernels are first imported
    elif not torch.cuda.is_available():
        raise SystemExit("no CUDA device: use --cpu (Triton's interpreter) for a smoke run")
    import nvfp4_kernels

    torch.manual_seed(0)
    x = torch.randn(args.rows, args.cols, device=args.device).to(torch.bfloat16)
    moved = x.numel() * (x.element_size() + 4)  # read bf16 x, write fp32 local
    buf = torch.empty(moved // 2, dtype=torch.uint8, device=args.device)
    t_copy = timeit(lambda: torch.empty_like(buf).copy_(buf), args.device, args.warmup,
                    args.reps)
    print(header(args, x))
    print("| kernel | backend | ms | GB/s | % of copy | exact |\n|---|---|---:|---:|---:|---|")
    print(row(f"copy, {moved / 2**20:.4g} MiB moved", "torch", t_copy, moved, t_copy, "-"),
          flush=True)
    compiled = {"none": (), "few": FEW_COMPILED, "all": tuple(CASES)}[args.compiled]
    notes = []
    for name in args.cases.split(",") if args.cases else CASES:
        spec = CASES[name]
        ref = fake_quantize_parts(x, spec, seed=7, stream=STREAM)[0]
        for backend in ("triton", "compiled") if name in compiled else ("triton",):
            fn = operand_fn(nvfp4_kernels, x, spec, backend)
            t0 = time.perf_counter()
            exact = "yes" if same_bits(fn()[0], ref) else "NO"
            if backend == "compiled":
                notes.append(f"# {name}: compile + first call {time.perf_counter() - t0:.1f} s")
            elif not nvfp4_kernels.supported(spec):
                backend = "triton (reference: no kernel)"
            t = timeit(fn, args.device, args.warmup, args.reps)
            print(row(name, backend, t, moved, t_copy, exact), flush=True)
        del ref
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
