"""Quantization kernels' effective bandwidth against a device-to-device copy, same run.

    python benchmarks/bench_kernels.py                  # CUDA: bf16 8192 x 8192 (64M values)
    python benchmarks/bench_kernels.py --quick          # CUDA: 2048 x 2048
    python benchmarks/bench_kernels.py --quick --cpu    # CPU smoke: Triton's interpreter, 64 x 256

For each quantizer a GEMM operand can need, times the ``triton`` kernels in the three forms
they write, and, for a few, ``quant.compiled.fake_quantize_parts`` (torch.compile of
the reference; its compile time is printed apart):

    triton          ``operand``: bf16 x in, fp32 ``local`` out        2 + 4 bytes a value
    triton bf16     ``operand(local_dtype=bf16)`` (FP4: what training
                    uses on CUDA, the BF16 GEMM's input)               2 + 2 bytes a value
    triton codes    ``quantize``: packed codes + scale bytes (FP4)     2 + 1/2 + 1/block

Effective bandwidth = those bytes / time, whatever passes a kernel makes (NVFP4 and
per-tensor FP8 read x twice: their ceiling is below a copy's). The baseline is
``torch.empty_like(buf).copy_(buf)`` of a buffer of 3 bytes a value (a copy reads and writes
it: 6 bytes a value moved), timed in the same run; "% of copy" compares bandwidths. The
issue's target on an H100/H200: quantize kernels >= 60 % of copy bandwidth on tensors of >=
64M values.

Every result is also compared with the eager reference, bit for bit (``exact``: the local, or
the codes and scale bytes), and a spec no kernel covers says ``reference`` (the dispatcher
computes it with the reference).
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

from nvfp4_lab.formats import QuantSpec, Stream, fake_quantize_parts, quantize
from nvfp4_lab.formats.spec import FP4_FORMATS
from nvfp4_lab.quant.compiled import fake_quantize_parts as compiled_parts

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


def variants(kernels, x: torch.Tensor, spec: QuantSpec, compiled: bool):
    """{label: (fn, bytes moved a value, exact(result) -> bool)} for one quantizer."""
    kw = dict(seed=7, stream=STREAM)
    ref = fake_quantize_parts(x, spec, **kw)[0]

    def local_exact(out) -> bool:
        return same_bits(out[0].float(), ref)

    out = {"triton": (lambda: kernels.operand(x, spec, **kw), 6, local_exact)}
    if spec.fmt in FP4_FORMATS:
        q = quantize(x, spec, **kw)
        out["triton bf16"] = (lambda: kernels.operand(x, spec, **kw, local_dtype=torch.bfloat16),
                              4, local_exact)
        out["triton codes"] = (lambda: kernels.quantize(x, spec, **kw),
                               2 + 0.5 + 1 / spec.layout.size ** (2 if spec.layout.kind == "2d"
                                                                  else 1),
                               lambda got: torch.equal(got.data, q.data) and torch.equal(
                                   got.scales.view(torch.uint8), q.scales.view(torch.uint8)))
    if compiled:
        out["compiled"] = (lambda: compiled_parts(x, spec, **kw), 6,
                           local_exact)
    return out


def row(name: str, backend: str, t: float, moved: float, copy_gbs: float, exact: str) -> str:
    gbs = moved / t / 1e6
    return f"| {name} | {backend} | {t:.3f} | {gbs:.4g} | {100 * gbs / copy_gbs:.3g} | {exact} |"


def main() -> None:
    args = parse_args()
    if args.cpu:
        os.environ["TRITON_INTERPRET"] = "1"  # before the kernels are first imported
    elif not torch.cuda.is_available():
        raise SystemExit("no CUDA device: use --cpu (Triton's interpreter) for a smoke run")
    import nvfp4_kernels

    torch.manual_seed(0)
    x = torch.randn(args.rows, args.cols, device=args.device).to(torch.bfloat16)
    n = x.numel()
    buf = torch.empty(3 * n, dtype=torch.uint8, device=args.device)  # 6 bytes a value moved
    t_copy = timeit(lambda: torch.empty_like(buf).copy_(buf), args.device, args.warmup,
                    args.reps)
    copy_gbs = 6 * n / t_copy / 1e6
    print(header(args, x))
    print("| kernel | backend | ms | GB/s | % of copy | exact |\n|---|---|---:|---:|---:|---|")
    print(row(f"copy, {6 * n / 2**20:.4g} MiB moved", "torch", t_copy, 6 * n, copy_gbs, "-"),
          flush=True)
    compiled = {"none": (), "few": FEW_COMPILED, "all": tuple(CASES)}[args.compiled]
    notes = []
    for name in args.cases.split(",") if args.cases else CASES:
        spec = CASES[name]
        for backend, (fn, per_value, exact_fn) in variants(nvfp4_kernels, x, spec,
                                                          name in compiled).items():
            t0 = time.perf_counter()
            exact = "yes" if exact_fn(fn()) else "NO"
            if backend == "compiled":
                notes.append(f"# {name}: compile + first call {time.perf_counter() - t0:.1f} s")
            elif not nvfp4_kernels.supported(spec):
                backend += " (reference: no kernel)"
            t = timeit(fn, args.device, args.warmup, args.reps)
            print(row(name, backend, t, per_value * n, copy_gbs, exact), flush=True)
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
