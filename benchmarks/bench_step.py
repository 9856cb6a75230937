"""One training step of the model per recipe preset and backend, as a ratio to the BF16 step.

    python benchmarks/bench_step.py --models small,base             # CUDA, batch 8 x 1024
    python benchmarks/bench_step.py --quick                          # CPU smoke (see --help)

A step is what the trainer does: forward under bf16 autocast, next-token loss, backward,
AdamW. The baseline is the ``bf16`` preset, which converts nothing (``quant.convert``
quantizes no layer of a BF16 recipe): the plain model, its linear layers running BF16 GEMMs
under autocast. Each other preset (``fp8``, ``mxfp4``, ``nvfp4`` = the full method) is a fresh
copy of the same model converted with the recipe's ``backend`` set to ``triton`` (the fused
kernels of ``kernels/``) or, when asked, ``compiled`` (torch.compile of the reference, which
training refuses on CUDA: not bit-exact there, benchmarks/RESULTS.md, GPU check). The row
``fp32 (no autocast)`` is context: an FP8 layer multiplies its dequantized operands in FP32
(``quant/gemm.py``), so that step's matmuls are what its emulated GEMMs cost; FP4 layers on
CUDA multiply BF16 operands (exact for FP4) into FP32 outputs, close to the BF16 step's GEMMs.

The backends are not self-tested here (the tests do that), so no self-test compiles count.
Timing: median of ``--reps`` steps after ``--warmup`` (compilation happens in the warm-up;
its time is printed). ``--budget-s`` skips the remaining rows, saying so, once that many
seconds have passed, so that a GPU check ends in time. The issue's target on an H100/H200:
NVFP4 full-recipe step <= 1.3x the BF16 step for ``base``. Record results in RESULTS.md.
"""
from __future__ import annotations

import argparse
import copy
import os
import time
import warnings
from importlib.metadata import version

import torch

from nvfp4_lab.model import Transformer, lm_loss, model_preset
from nvfp4_lab.quant import Report, convert, make_backend, preset, quant_state

try:  # run as a script from the repository root or as a module
    from bench_kernels import timeit
except ImportError:  # pragma: no cover
    from benchmarks.bench_kernels import timeit

QUANT_PRESETS = ("fp8", "mxfp4", "nvfp4")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="CPU smoke run: nano with its last block quantized, batch 2 x 64, "
                        "one step, triton backend in the interpreter")
    p.add_argument("--models", help="model presets (default small,base; quick: nano)")
    p.add_argument("--presets", default=",".join(QUANT_PRESETS))
    p.add_argument("--backends", default="triton",
                   help="default triton; compiled times torch.compile of the reference, which "
                        "training refuses on CUDA (not bit-exact there)")
    p.add_argument("--batch", type=int, help="default 8 (quick: 2)")
    p.add_argument("--seq", type=int, help="default 1024 (quick: 64)")
    p.add_argument("--vocab", type=int, help="default 32768 (quick: 512)")
    p.add_argument("--warmup", type=int, help="default 3 (quick: 0)")
    p.add_argument("--reps", type=int, help="default 10 (quick: 1)")
    p.add_argument("--budget-s", type=float, default=0.0,
                   help="skip the rows left after this many seconds (0: no limit)")
    p.add_argument("--device", help="default cuda (quick: cpu)")
    args = p.parse_args()
    q = args.quick
    args.models = args.models or ("nano" if q else "small,base")
    args.batch = args.batch or (2 if q else 8)
    args.seq = args.seq or (64 if q else 1024)
    args.warmup = args.warmup if args.warmup is not None else (0 if q else 3)
    args.reps = args.reps or (1 if q else 10)
    args.device = args.device or ("cpu" if q else "cuda")
    args.vocab = args.vocab or (512 if q else 32768)
    return args


def step_fn(model: torch.nn.Module, idx: torch.Tensor, autocast: bool):
    """fn() running one optimizer step of ``model`` on ``idx`` (targets: idx shifted)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    state = quant_state(model)
    device = idx.device.type

    def step():
        with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
            loss = lm_loss(model(idx[:, :-1]), idx[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if state is not None:
            state.step += 1  # fresh stochastic-rounding bits every step, as in training

    return step


def measure(model, idx, args, autocast: bool = True) -> tuple[float, float]:
    """(median ms per step, seconds spent in the warm-up steps)."""
    step = step_fn(model, idx, autocast)
    t0 = time.perf_counter()
    for _ in range(args.warmup):
        step()
    if args.device == "cuda":
        torch.cuda.synchronize()
    warm = time.perf_counter() - t0
    return timeit(step, args.device, 0, args.reps), warm


def build(name: str, args) -> tuple[torch.nn.Module, torch.Tensor]:
    """(model preset ``name`` on the device, a batch of token ids [batch, seq + 1])."""
    torch.manual_seed(0)
    cfg = model_preset(name, vocab_size=args.vocab, max_seq_len=args.seq)
    model = Transformer(cfg).to(args.device)
    return model, torch.randint(args.vocab, (args.batch, args.seq + 1), device=args.device)


def baseline_rows(name: str, base, idx, args) -> float:
    """Print the BF16 and FP32 rows of a model; return the BF16 step's milliseconds."""
    t_bf16, warm = measure(copy.deepcopy(base), idx, args)
    print(f"| {name} | bf16 (baseline) | - | {t_bf16:.1f} | 1.00 | {warm:.1f} |", flush=True)
    t, warm = measure(copy.deepcopy(base), idx, args, autocast=False)
    print(f"| {name} | fp32 (no autocast) | - | {t:.1f} | {t / t_bf16:.2f} | {warm:.1f} |",
          flush=True)
    return t_bf16


def converted(base: torch.nn.Module, recipe_name: str, backend: str,
              quick: bool) -> tuple[torch.nn.Module, Report]:
    """A copy of ``base`` converted with a preset on a backend (quick: the last block only,
    the interpreter being slow), and the converter's report."""
    model = copy.deepcopy(base)
    recipe = preset(recipe_name).replace(backend=backend)
    if quick:
        recipe = recipe.replace(high_precision={"first": len(model.blocks) - 1, "last": 0})
    return model, convert(model, recipe, backend=make_backend(backend))


def preset_row(name: str, base, idx, recipe_name: str, backend: str, t_bf16: float,
               args) -> None:
    """Print the row of a model converted with a preset and a backend."""
    model, report = converted(base, recipe_name, backend, args.quick)
    t, warm = measure(model, idx, args)
    print(f"| {name} | {recipe_name} ({len(report.quantized)}/{len(report.layers)} linear "
          f"quantized) | {backend} | {t:.1f} | {t / t_bf16:.2f} | {warm:.1f} |", flush=True)


def main() -> None:
    args = parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: use --quick (or --device cpu) on the CPU")
    if args.device == "cpu" and "triton" in args.backends:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are imported
        # numpy's notes on inf intermediates that the kernels then clamp or mask
        warnings.filterwarnings("ignore", "overflow|divide by zero", RuntimeWarning)
    where = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    print(f"# {where}; torch {torch.__version__}, triton {version('triton')}; batch "
          f"{args.batch} x seq {args.seq}, vocab {args.vocab}; median of {args.reps} steps "
          f"after {args.warmup} warm-up steps; TF32 matmuls "
          f"{'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}")
    print("| model | recipe | backend | ms / step | x BF16 step | warm-up s |\n"
          "|---|---|---|---:|---:|---:|", flush=True)
    t_start = time.perf_counter()
    models = {name: build(name, args) for name in args.models.split(",")}
    t_bf16 = {name: baseline_rows(name, *models[name], args) for name in models}
    # every model's triton rows first: they are the fast ones, and hold the target
    for backend in args.backends.split(","):
        for name, (base, idx) in models.items():
            for recipe_name in args.presets.split(","):
                if args.budget_s and time.perf_counter() - t_start > args.budget_s:
                    print(f"| {name} | {recipe_name} | {backend} | skipped: past --budget-s "
                          f"{args.budget_s:.0f} | | |", flush=True)
                    continue
                preset_row(name, base, idx, recipe_name, backend, t_bf16[name], args)

if __name__ == "__main__":
    main()
