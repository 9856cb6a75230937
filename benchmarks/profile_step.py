"""Where a training step's time goes: torch.profiler over a few steps, per model and recipe.

    python benchmarks/profile_step.py                     # CUDA: small and base, bf16 and nvfp4
    python benchmarks/profile_step.py --cpu               # CPU smoke: nano, CPU activity only

The step is ``bench_step.py``'s (forward under bf16 autocast, loss, backward, AdamW; batch 8
x 1024), each recipe converted with the ``triton`` backend (``bf16`` converts nothing). After
``--warmup`` steps (autotuning and compilation happen there), ``--steps`` steps run without
the profiler, for the wall time per step (synchronized) and the host time (until ``step()``
returns: what Python, autograd and the kernels' launchers cost the CPU), then ``--steps``
steps under torch.profiler with CUDA activity and ``record_shapes``. Printed per model and
recipe:

    launches      per step: the device's kernels, copies and fills (its CUDA events); on the
                  CPU, the aten ops the host calls directly (no aten op above them)
    top kernels   the ``--top`` launches by device time, with their calls per step
    GEMMs         each GEMM op (mm, addmm, bmm, ...) by operand shapes, with the first
                  kernel it launched: achieved TFLOP/s = 2 M N K per call / the device time
                  of its kernels (on the CPU: the op's time)
    host, device  ms per step: the wall time, the host time, and the device's busy time (the
                  launches' times summed). Busy near wall: the kernels bound the step; busy
                  well below wall: the host does (issuing launches). The host time alone
                  does not tell: the host also waits when the launch queue is full

and a summary table, with the extra launches per quantized layer against the BF16 step of
the same model (the CPU estimate: ``bench_dispatch.py``). With ``--out`` (default ``$OUT``)
each model and recipe's chrome trace (``<model>_<recipe>.trace.json.gz``, for Perfetto or
chrome://tracing) and report (``<model>_<recipe>.txt``) are written there as each finishes.
``--budget-s`` skips the remaining rows once that many seconds have passed, so that a GPU
check ends in time. On the CPU the kernels run in Triton's interpreter: the numbers mean
nothing, the tables are the check that the script works.
"""
from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import tempfile
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass
from importlib.metadata import version
from math import prod
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

try:  # run as a script from the repository root or as a module
    from bench_step import build, converted, step_fn
except ImportError:  # pragma: no cover
    from benchmarks.bench_step import build, converted, step_fn

# GEMM ops, and which two inputs are the matrices
GEMM_OPERANDS = {"aten::mm": (0, 1), "aten::bmm": (0, 1), "aten::_scaled_mm": (0, 1),
                 "aten::addmm": (1, 2), "aten::baddbmm": (1, 2)}
NAME_WIDTH = 90


@dataclass(frozen=True)
class Launch:
    """A kernel, copy or fill on the device (on the CPU: an aten op the host calls)."""

    name: str
    us: float


@dataclass(frozen=True)
class GemmCall:
    """One GEMM op: its operand shapes, 2 M N K, the device time of its kernels, the first
    kernel's name."""

    op: str
    shapes: tuple[tuple[int, ...], tuple[int, ...]]
    flops: int
    us: float
    kernel: str


@dataclass(frozen=True)
class Profile:
    """What ``--steps`` profiled steps launched, and the unprofiled steps' times."""

    steps: int
    launches: tuple[Launch, ...]
    gemms: tuple[GemmCall, ...]
    wall_ms: float
    host_ms: float

    def per_step(self, n: float) -> float:
        return n / self.steps

    @property
    def device_ms(self) -> float:
        return self.per_step(sum(x.us for x in self.launches)) / 1e3


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpu", action="store_true",
                   help="CPU smoke run: CPU activity only, nano with its last block quantized, "
                        "batch 2 x 64, the kernels in Triton's interpreter")
    p.add_argument("--models", help="model presets (default small,base; cpu: nano)")
    p.add_argument("--presets", default="bf16,nvfp4")
    p.add_argument("--batch", type=int, help="default 8 (cpu: 2)")
    p.add_argument("--seq", type=int, help="default 1024 (cpu: 64)")
    p.add_argument("--vocab", type=int, help="default 32768 (cpu: 512)")
    p.add_argument("--warmup", type=int, help="default 3 (cpu: 1)")
    p.add_argument("--steps", type=int, help="timed and profiled steps, each (default 3; cpu: 1)")
    p.add_argument("--top", type=int, default=15, help="kernels listed by device time")
    p.add_argument("--budget-s", type=float, default=0.0,
                   help="skip the rows left after this many seconds (0: no limit)")
    p.add_argument("--out", default=os.environ.get("OUT") or None,
                   help="folder for the traces and reports (default $OUT; none: not written)")
    args = p.parse_args()
    c = args.cpu
    args.models = args.models or ("nano" if c else "small,base")
    args.batch = args.batch or (2 if c else 8)
    args.seq = args.seq or (64 if c else 1024)
    args.vocab = args.vocab or (512 if c else 32768)
    args.warmup = args.warmup if args.warmup is not None else (1 if c else 3)
    args.steps = args.steps or (1 if c else 3)
    args.device = "cpu" if c else "cuda"
    return args


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(step, steps: int, device: str) -> tuple[float, float]:
    """(wall ms per step, synchronized; median host ms per step, until ``step()`` returns)."""
    sync(device)
    host = []
    t0 = time.perf_counter()
    for _ in range(steps):
        t = time.perf_counter()
        step()
        host.append((time.perf_counter() - t) * 1e3)
    sync(device)
    return (time.perf_counter() - t0) * 1e3 / steps, statistics.median(host)


def launches(events, device: str) -> tuple[Launch, ...]:
    """The device's launches among the profiler's events (module docstring)."""
    if device == "cuda":
        return tuple(Launch(e.name, e.time_range.elapsed_us()) for e in events
                     if e.device_type == DeviceType.CUDA and not e.is_user_annotation)
    return tuple(Launch(e.name, e.cpu_time_total) for e in events
                 if _aten(e) and not _has_aten_above(e))


def _aten(e) -> bool:
    return e.device_type == DeviceType.CPU and not e.is_async and e.name.startswith("aten::")


def _has_aten_above(e) -> bool:
    parent = e.cpu_parent
    while parent is not None and not parent.name.startswith("aten::"):
        parent = parent.cpu_parent
    return parent is not None


def gemm_calls(events, device: str) -> tuple[GemmCall, ...]:
    """Each GEMM op among the profiler's events, with its kernels' device time (CPU: its own
    time)."""
    calls = []
    for e in events:
        if e.name not in GEMM_OPERANDS or e.device_type != DeviceType.CPU:
            continue
        i, j = GEMM_OPERANDS[e.name]
        a, b = tuple(e.input_shapes[i]), tuple(e.input_shapes[j])
        if device == "cuda":
            us, kernel = e.device_time_total, e.kernels[0].name if e.kernels else "-"
        else:
            us, kernel = e.cpu_time_total, "-"
        calls.append(GemmCall(e.name, (a, b), 2 * prod(a) * b[-1], us, kernel))
    return tuple(calls)


def profiled(step, args, trace: Path | None) -> tuple[tuple[Launch, ...], tuple[GemmCall, ...]]:
    """Run ``args.steps`` steps under the profiler; write the chrome trace (gzipped) to
    ``trace`` if given."""
    activities = [ProfilerActivity.CPU]
    if args.device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    sync(args.device)
    with profile(activities=activities, record_shapes=True) as prof:
        for _ in range(args.steps):
            step()
        sync(args.device)
    if trace is not None:
        with tempfile.TemporaryDirectory() as tmp:
            raw = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(raw))
            with raw.open("rb") as src, gzip.open(trace, "wb") as dst:
                shutil.copyfileobj(src, dst)
    events = prof.events()
    return launches(events, args.device), gemm_calls(events, args.device)


def _short(name: str) -> str:
    return name if len(name) <= NAME_WIDTH else name[:NAME_WIDTH - 3] + "..."


def report(title: str, p: Profile, top: int) -> str:
    """The host and device line, the top launches and the GEMMs of one profile."""
    lines = [f"## {title}",
             f"wall {p.wall_ms:.1f} ms/step, host {p.host_ms:.1f} ms/step, device busy "
             f"{p.device_ms:.1f} ms/step ({100 * p.device_ms / p.wall_ms:.0f}% of wall); "
             f"launches {p.per_step(len(p.launches)):.1f}/step",
             "", f"| top {top} launches by device time | calls / step | ms / step | % of device |",
             "|---|---:|---:|---:|"]
    by_name: dict[str, list[float]] = defaultdict(list)
    for x in p.launches:
        by_name[x.name].append(x.us)
    total = sum(x.us for x in p.launches) or 1.0
    for name, us in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]:
        lines.append(f"| {_short(name)} | {p.per_step(len(us)):g} | "
                     f"{p.per_step(sum(us)) / 1e3:.3f} | {100 * sum(us) / total:.1f} |")
    lines += ["", "| GEMM | A x B | first kernel | calls / step | ms / step | TFLOP/s |",
              "|---|---|---|---:|---:|---:|"]
    groups: dict[tuple, list[GemmCall]] = defaultdict(list)
    for g in p.gemms:
        groups[(g.op, g.shapes, g.kernel)].append(g)
    for (op, (a, b), kernel), calls in sorted(groups.items(),
                                              key=lambda kv: -sum(g.us for g in kv[1])):
        lines.append(f"| {op} | {list(a)} x {list(b)} | {_short(kernel)} | "
                     f"{p.per_step(len(calls)):g} | {_gemm_cells(p, calls)} |")
    flops, us = sum(g.flops for g in p.gemms), sum(g.us for g in p.gemms)
    lines.append(f"GEMMs in all: {p.per_step(len(p.gemms)):g} calls/step, "
                 f"{p.per_step(flops) / 1e9:.6g} GFLOP/step, {p.per_step(us) / 1e3:.3f} "
                 f"ms/step, {_tflops(flops, us)} TFLOP/s, {100 * us / total:.1f}% of device")
    return "\n".join(lines)


def _gemm_cells(p: Profile, calls: list[GemmCall]) -> str:
    us = sum(g.us for g in calls)
    return f"{p.per_step(us) / 1e3:.3f} | {_tflops(sum(g.flops for g in calls), us)}"


def _tflops(flops: float, us: float) -> str:
    return f"{flops / us / 1e6:.4g}" if us else "-"


def run_one(name: str, recipe: str, base, idx, args) -> tuple[Profile, int]:
    """Profile one model and recipe; print and write its report. Returns the profile and the
    number of quantized linear layers."""
    model, rep = converted(base, recipe, "triton", quick=args.cpu)
    step = step_fn(model, idx, autocast=True)
    for _ in range(args.warmup):
        step()
    wall, host = timed(step, args.steps, args.device)
    out = Path(args.out) if args.out else None
    trace = out / f"{name}_{recipe}.trace.json.gz" if out else None
    p = Profile(args.steps, *profiled(step, args, trace), wall, host)
    title = (f"{name} {recipe} ({len(rep.quantized)}/{len(rep.layers)} linear quantized, "
             f"{rep.backend} backend)")
    text = report(title, p, args.top)
    print(text + "\n", flush=True)
    if out:
        (out / f"{name}_{recipe}.txt").write_text(text + "\n")
    return p, len(rep.quantized)


def summary(rows: dict[tuple[str, str], tuple[Profile, int]]) -> str:
    """One line per model and recipe, against the same model's BF16 step where profiled."""
    lines = ["| model | recipe | wall ms | x BF16 | host ms | device ms | launches / step | "
             "extra launches / quantized layer |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for (name, recipe), (p, n_quant) in rows.items():
        bf16 = rows.get((name, "bf16"), (None, 0))[0]
        ratio = f"{p.wall_ms / bf16.wall_ms:.2f}" if bf16 else "-"
        n = p.per_step(len(p.launches))
        extra = (f"{(n - bf16.per_step(len(bf16.launches))) / n_quant:.1f}"
                 if bf16 and n_quant else "-")
        lines.append(f"| {name} | {recipe} | {p.wall_ms:.1f} | {ratio} | {p.host_ms:.1f} | "
                     f"{p.device_ms:.1f} | {n:.1f} | {extra} |")
    return "\n".join(lines)


def main() -> None:
    args = parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: use --cpu on the CPU")
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are imported
        # numpy's notes on inf intermediates that the kernels then clamp or mask
        warnings.filterwarnings("ignore", "overflow|divide by zero", RuntimeWarning)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    where = torch.cuda.get_device_name() if args.device == "cuda" else "CPU (CPU activity only)"
    print(f"# profile_step: {where}; torch {torch.__version__}, triton {version('triton')}; "
          f"batch {args.batch} x seq {args.seq}, vocab {args.vocab}; {args.steps} steps timed "
          f"and {args.steps} profiled after {args.warmup} warm-up steps\n", flush=True)
    t_start = time.perf_counter()
    rows = {}
    for name in args.models.split(","):
        base, idx = build(name, args)
        for recipe in args.presets.split(","):
            if args.budget_s and time.perf_counter() - t_start > args.budget_s:
                print(f"## {name} {recipe}: skipped, past --budget-s {args.budget_s:.0f}\n",
                      flush=True)
                continue
            rows[(name, recipe)] = run_one(name, recipe, base, idx, args)
    print(summary(rows))


if __name__ == "__main__":
    main()
