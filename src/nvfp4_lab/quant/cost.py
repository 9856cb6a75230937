"""``backend=auto`` on a CPU: the backend that finishes the configured run soonest.

Both CPU backends compute the same bits; they differ in what they cost. ``reference`` (eager
PyTorch) starts at once but runs each step at several times the BF16 step; ``compiled``
(inductor's code for the same functions) runs a step in a fraction of the reference's time
but first compiles every quantizer of the recipe into an AOTInductor package, a minute on a
cold cache and seconds of loading once they are in the machine's compile cache
(``packaged.compile_cache_dir``; benchmarks/RESULTS.md, Compiled quantizers as AOTInductor
packages). Which
wins depends on the run's length and on what this machine has already compiled, so ``auto``
decides from timings this machine measured:

    finish(reference) = steps x ms_reference
    finish(compiled)  = startup_compiled + steps x ms_compiled

Every finished CPU run records its steady ms/step and its start-up seconds (wall time not
spent in steady steps) under a key of what sets them: the recipe's quantizers, the model's
dimensions, tokens per step, threads and torch version (``RunKey``). A backend not yet
measured for the key is estimated from the other: a compiled step at ``COMPILED_STEP_RATIO``
of the reference's and a reference step at its inverse, and, when compiled never ran for the
key, the cold compile's start-up: the longest this machine measured for any key (a cold cache
and this machine's load), else the shipped table's (below). With
neither backend measured for the key, the BF16 step of the same model and batch, if this
machine ran one, bounds the reference's step from below (the reference does BF16's work and
quantizes on top): when even at that bound compiling would pay for itself within the run,
``auto`` compiles. A sweep on a fresh machine, whose BF16 arm runs first, thus compiles its
first long FP4 run instead of spending it on the reference. With nothing at all measured,
``auto`` starts on the reference (no compile) and times its first steps, then switches to
compiled if that pays for the rest of the run. This module is the ledger and the rule; the
run's ``AutoBackend`` (``train/auto_backend.py``) applies them: it chooses, probes, switches and
records.

The same timings, with the seconds a validation pass took, estimate a whole run for
``--dry-run`` and a sweep's progress lines (``sweep/plan.py``):

    run(backend) = startup_backend + steps x ms_backend + validations x s_validation

Where this machine measured nothing for a run, the first estimate comes from the one table of
step times shipped with the package, ``step_times.csv``: per machine class, the step times
measured for a format, model, batch and threads (benchmarks/RESULTS.md, results/). The row of
the run's format and backend nearest to it (this machine class first, then its threads) is
scaled by the run's work over the row's (``work_per_token`` x tokens per step), and the result
is labelled an estimate (``Estimate.measured`` false) until the run's own timing is recorded.
Its GPU rows (``device`` cuda) are not matched here: a GPU run's time is extrapolated from
them by ``gpu_time.py``.
"""
from __future__ import annotations

import csv
import functools
import hashlib
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, cast

from ..model.presets import model_preset
from .recipe import NO_BACKEND

if TYPE_CHECKING:
    from ..formats.spec import QuantSpec
    from ..model.config import ModelConfig

# compiled over reference ms/step for NVFP4 at nano, for a backend this machine has not
# measured yet (benchmarks/RESULTS.md, Where the compiled backend's bars stand, over Eager
# quantizers without `where`: about half, rounded up so that auto compiles only when it pays)
COMPILED_STEP_RATIO = 0.6
SHIPPED = Path(__file__).with_name("step_times.csv")
CPU_BACKENDS = ("reference", "compiled")
RECORDED = (*CPU_BACKENDS, NO_BACKEND)   # BF16 runs too: their step bounds an FP4 run's
NO_SPECS = repr([])   # run_key's specs for a run that quantizes nothing (BF16)


@dataclass(frozen=True)
class RunKey:
    """What a run's per-step time depends on, as a short stable string."""

    specs: str
    model: str
    tokens_per_step: int
    threads: int
    torch: str

    def __str__(self) -> str:
        fields = (self.specs, self.model, self.tokens_per_step, self.threads, self.torch)
        return hashlib.sha256(repr(fields).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Timing:
    """A finished run's steady ms/step, its seconds before steady steps, and the seconds of
    one validation pass (0: not measured)."""

    ms_per_step: float
    startup_s: float
    eval_s: float = 0.0


@dataclass(frozen=True)
class Choice:
    backend: str
    reason: str
    probe: bool = False   # nothing known: time the reference's first steps, then decide


def run_key(specs: Sequence[QuantSpec], model_cfg: ModelConfig, tokens_per_step: int,
            threads: int) -> RunKey:
    """The key a run's timing is filed under: its quantizer specs (none for BF16), the model
    config (vocabulary resolved), tokens per step, threads, torch version."""
    import torch

    return RunKey(repr(sorted(map(repr, set(specs)))), repr(model_cfg), tokens_per_step,
                  threads, torch.__version__)


def ledger_path() -> Path:
    from ..cache import cache_root

    return cache_root() / "timings.json"


def load(path: Path | None = None) -> dict[str, dict[str, Timing]]:
    path = path or ledger_path()
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: {b: Timing(**t) for b, t in v.items()} for k, v in raw.items()}


def record(key: RunKey, backend: str, timing: Timing, path: Path | None = None) -> None:
    """Add a measured timing (the newest replaces the older); atomic, so parallel jobs of a
    sweep can only lose an entry, never corrupt the file."""
    path = path or ledger_path()
    ledger = load(path)
    ledger.setdefault(str(key), {})[backend] = timing
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({k: {b: t.__dict__ for b, t in v.items()}
                               for k, v in ledger.items()}, indent=1))
    tmp.replace(path)


def _rates(key: RunKey, path: Path | None) -> tuple[float, float, float, str] | None:
    """(reference ms/step, compiled ms/step, compiled start-up s, how they were known) for
    ``key``; a backend not measured is estimated from the other. None: neither measured."""
    known = load(path).get(str(key), {})
    ref, comp = known.get("reference"), known.get("compiled")
    if ref is None and comp is None:
        return None
    ref_ms = ref.ms_per_step if ref else cast(Timing, comp).ms_per_step / COMPILED_STEP_RATIO
    comp_ms = comp.ms_per_step if comp else ref_ms * COMPILED_STEP_RATIO
    startup = comp.startup_s if comp else cold_compile_s(path)
    return ref_ms, comp_ms, startup, ("measured" if ref and comp else
                                      "estimated from one measured backend")


def cold_compile_s(path: Path | None = None) -> float:
    """Seconds a compiled run spends compiling on a cold cache: the longest compiled start-up
    this machine's ledger holds (a cold build, at this machine's load), else the longest the
    shipped table holds."""
    measured = [t.startup_s for entry in load(path).values()
                for backend, t in entry.items() if backend == "compiled"]
    return max(measured or [r.startup_s or 0.0 for r in shipped() if r.backend == "compiled"])


def _bf16_ms(key: RunKey, path: Path | None) -> float | None:
    """The fastest BF16 step this machine measured for ``key``'s model, batch, threads and
    torch, whichever backend ran it; None if it never ran one."""
    bf16 = load(path).get(str(replace(key, specs=NO_SPECS)), {})
    return min((t.ms_per_step for t in bf16.values()), default=None)


def finish_times(key: RunKey, steps: int, path: Path | None = None) -> dict[str, float] | None:
    """Seconds each CPU backend would take for ``steps`` steps (the start-up both share is
    left out), from this machine's timings; None when neither was ever measured for ``key``."""
    rates = _rates(key, path)
    return None if rates is None else _times(rates, steps)


def _times(rates: tuple[float, float, float, str], steps: int) -> dict[str, float]:
    ref_ms, comp_ms, startup, _ = rates
    return {"reference": steps * ref_ms / 1000, "compiled": startup + steps * comp_ms / 1000}


def run_seconds(key: RunKey, steps: int, evals: int, backend: str,
                path: Path | None = None) -> float | None:
    """Wall seconds of a whole run on ``backend``: ``finish_times`` (whose compiled figure
    holds its whole start-up), the reference's measured start-up, and ``evals`` validation
    passes at the backend's measured cost (else the other's); None: nothing measured."""
    known = load(path).get(str(key), {})
    times = finish_times(key, steps, path)
    if times is None:
        return None
    own = known.get(backend)
    eval_s = own.eval_s if own and own.eval_s else max(t.eval_s for t in known.values())
    startup = known["reference"].startup_s if backend == "reference" and own else 0.0
    return times[backend] + startup + evals * eval_s


def bf16_seconds(key: RunKey, steps: int, evals: int, path: Path | None = None) -> float | None:
    """Wall seconds of a run that quantizes nothing, at its fastest measured step (whichever
    backend an older version filed it under: none computes anything); None: never measured."""
    known = load(path).get(str(key), {})
    if not known:
        return None
    t = min(known.values(), key=lambda t: t.ms_per_step)
    return t.startup_s + steps * t.ms_per_step / 1000 + evals * t.eval_s


def cold_start_times(ref_ms: float, steps: int, path: Path | None = None) -> dict[str, float]:
    """``finish_times`` for ``steps`` steps from a reference step alone (measured, not yet in
    the ledger): the compiled step estimated from it, on a cold compile cache."""
    return _times((ref_ms, ref_ms * COMPILED_STEP_RATIO, cold_compile_s(path), "estimated"),
                  steps)


NOTHING_QUANTIZED = ("nothing quantized: every linear layer runs in high precision, no "
                     "quantization backend runs")


def pick(backend: str, quantized: bool, device: str, key: RunKey | None, steps: int,
         path: Path | None = None) -> Choice:
    """The one choice of a run's backend, for the run, its dry run and its sweep's plan:
    none where nothing is quantized; a named backend as named; ``auto`` on CUDA the Triton
    kernels (self-tested when the run starts, the reference where they fail); ``auto`` on a
    CPU the ledger's (``choose``; ``key`` holds the torch version)."""
    if not quantized:
        return Choice(NO_BACKEND, NOTHING_QUANTIZED)
    if backend != "auto":
        return Choice(backend, f"quant.backend={backend}, as named")
    if device == "cuda":
        return Choice("triton", "auto on CUDA: the Triton kernels, self-tested as the run "
                                "starts; the reference where they fail")
    if key is None:
        raise ValueError("backend auto on a CPU is chosen from the run's ledger key; none given")
    return choose(key, steps, path)


def choose(key: RunKey, steps: int, path: Path | None = None) -> Choice:
    """The CPU backend that finishes ``steps`` steps soonest, by this machine's timings; the
    reference where this torch is older than the compiled backend's."""
    from .packaged import MIN_TORCH, torch_checked

    if not torch_checked(key.torch):
        return Choice("reference", f"torch {key.torch} is older than {MIN_TORCH}, the compiled "
                      f"backend's (quant/packaged.py)")
    rates = _rates(key, path)
    if rates is None:
        floor, cold = _bf16_ms(key, path), cold_compile_s(path)
        saved = None if floor is None else steps * floor * (1 - COMPILED_STEP_RATIO) / 1000
        if saved is not None and saved > cold:
            return Choice("compiled", f"{steps} steps, no timings for this recipe yet: at "
                          f"this machine's BF16 step for this model and batch ({floor:.0f} "
                          f"ms), the least a reference step costs, compiling saves at least "
                          f"~{saved:.0f} s against ~{cold:.0f} s of cold compile; "
                          f"this run's timing is recorded for the next")
        return Choice("reference", "no timings measured on this machine for this recipe, "
                      "model and batch yet: starts on the reference (nothing to compile) and "
                      "times its first steps to decide whether compiling pays for the rest",
                      probe=True)
    ref_ms, comp_ms, startup, how = rates
    times = _times(rates, steps)                # one read of the ledger, not two
    best = min(times, key=lambda b: times[b])
    return Choice(best, f"{steps} steps: compiled ~{times['compiled']:.0f} s (start-up "
                        f"{startup:.0f} s + {comp_ms:.0f} ms/step) vs reference "
                        f"~{times['reference']:.0f} s ({ref_ms:.0f} ms/step), {how}")


@dataclass(frozen=True)
class Shape:
    """What a first estimate is matched and scaled on: the machine class, the recipe's format,
    the model's ``work_per_token``, tokens per step and threads."""

    machine_class: str
    format: str
    work: float
    tokens_per_step: int
    threads: int


def work_per_token(d_model: int, n_layers: int, vocab_size: int) -> float:
    """A step's work per token up to a constant: 12 L d^2 (the blocks' GEMMs) + V d (head)."""
    return 12 * n_layers * d_model ** 2 + vocab_size * d_model


@dataclass(frozen=True)
class Shipped:
    """A row of ``step_times.csv``: ms/step and start-up of one configuration on one machine
    class, a CPU's or a GPU's (``device`` cpu | cuda; ``startup_s`` None: counted in its
    ms/step; ``threads`` 0 on a GPU, whose step they do not set)."""

    machine_class: str
    device: str
    format: str
    model: str
    vocab_size: int
    seq_len: int
    tokens_per_step: int
    threads: int
    backend: str
    ms_per_step: float
    startup_s: float | None
    measured: str

    @property
    def work(self) -> float:
        m = model_preset(self.model)
        return work_per_token(m.d_model, m.n_layers, self.vocab_size)


@functools.cache
def shipped() -> tuple[Shipped, ...]:
    with open(SHIPPED, newline="") as f:
        return tuple(Shipped(r["machine_class"], r["device"], r["format"], r["model"],
                             int(r["vocab_size"]), int(r["seq_len"]), int(r["tokens_per_step"]),
                             int(r["threads"]), r["backend"],
                             float(r["ms_per_step"]),
                             float(r["startup_s"]) if r["startup_s"] else None, r["measured"])
                     for r in csv.DictReader(f))


@dataclass(frozen=True)
class Estimate:
    """A whole run's wall seconds on ``backend``, ``measured`` here or a first estimate from
    the shipped table (``machine_class``: the class whose step times it scales)."""

    seconds: float
    backend: str
    measured: bool
    machine_class: str = ""

    @property
    def basis(self) -> str:
        return (f"the step times shipped for {self.machine_class}" if self.machine_class
                else "this machine's timings")

    def label(self) -> str:
        return "" if self.measured else f"estimate from {self.basis}"


def first_estimate(shape: Shape, steps: int, backend: str) -> Estimate | None:
    """``steps`` steps of ``shape`` on ``backend`` (``auto``: the sooner CPU backend) from the
    shipped table's nearest CPU row; None where it holds no row of the format and backend."""
    if shape.format == "bf16":
        backend = NO_BACKEND
    wanted = CPU_BACKENDS if backend == "auto" else (backend,)
    rows = [r for r in shipped() if r.device == "cpu" and r.format == shape.format
            and r.backend in wanted]
    if not rows:
        return None
    size = shape.work * shape.tokens_per_step

    def distance(r: Shipped) -> tuple[bool, bool, float]:
        return (r.machine_class != shape.machine_class, r.threads != shape.threads,
                abs(math.log(size / (r.work * r.tokens_per_step))))

    def seconds(r: Shipped) -> float:
        return (r.startup_s or 0.0) + steps * _scaled_ms(r, size) / 1000

    nearest = [min((r for r in rows if r.backend == b), key=distance)
               for b in wanted if any(r.backend == b for r in rows)]
    best = min(nearest, key=seconds)
    return Estimate(seconds(best), best.backend, False, best.machine_class)


def _scaled_ms(row: Shipped, size: float) -> float:
    """The row's ms/step scaled to a step of ``size`` (work x tokens per step)."""
    return row.ms_per_step * size / (row.work * row.tokens_per_step)
