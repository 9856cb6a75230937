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
of the reference's and a reference step at its inverse, and a compiled start-up of
``COLD_COMPILE_S`` when it never ran for the key (cold cache), else the measured one. With
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
``--dry-run`` and a sweep's progress lines (``train/sweep_plan.py``):

    run(backend) = startup_backend + steps x ms_backend + validations x s_validation
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from .recipe import NO_BACKEND

# the estimates for what this machine has not measured yet, from benchmarks/RESULTS.md: the
# start-up of a cold-cache compiled run (Compiled quantizers as AOTInductor packages), and
# compiled over reference ms/step for NVFP4 at nano (Where issue 14's bars stand, over Eager
# quantizers without `where`: about half, rounded up so that auto compiles only when it pays)
COLD_COMPILE_S = 60.0
COMPILED_STEP_RATIO = 0.6
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


def run_key(specs, model_cfg, tokens_per_step: int, threads: int) -> RunKey:
    """The key a run's timing is filed under: its quantizer specs (none for BF16), the model
    config (vocabulary resolved), tokens per step, threads, torch version."""
    import torch

    return RunKey(repr(sorted(map(repr, set(specs)))), repr(model_cfg), tokens_per_step,
                  threads, torch.__version__)


def ledger_path() -> Path:
    from .packaged import cache_root

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
    ref_ms = ref.ms_per_step if ref else comp.ms_per_step / COMPILED_STEP_RATIO
    comp_ms = comp.ms_per_step if comp else ref_ms * COMPILED_STEP_RATIO
    startup = comp.startup_s if comp else COLD_COMPILE_S
    return ref_ms, comp_ms, startup, ("measured" if ref and comp else
                                      "estimated from one measured backend")


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


def cold_start_times(ref_ms: float, steps: int) -> dict[str, float]:
    """``finish_times`` for ``steps`` steps from a reference step alone (measured, not yet in
    the ledger): the compiled step estimated from it, on a cold compile cache."""
    return _times((ref_ms, ref_ms * COMPILED_STEP_RATIO, COLD_COMPILE_S, "estimated"), steps)


def choose(key: RunKey, steps: int, path: Path | None = None) -> Choice:
    """The CPU backend that finishes ``steps`` steps soonest, by this machine's timings; the
    reference where this torch is older than the compiled backend's."""
    from .packaged import MIN_TORCH, torch_checked

    if not torch_checked(key.torch):
        return Choice("reference", f"torch {key.torch} is older than {MIN_TORCH}, the compiled "
                      f"backend's (quant/packaged.py)")
    rates = _rates(key, path)
    if rates is None:
        floor = _bf16_ms(key, path)
        saved = None if floor is None else steps * floor * (1 - COMPILED_STEP_RATIO) / 1000
        if saved is not None and saved > COLD_COMPILE_S:
            return Choice("compiled", f"{steps} steps, no timings for this recipe yet: at "
                          f"this machine's BF16 step for this model and batch ({floor:.0f} "
                          f"ms), the least a reference step costs, compiling saves at least "
                          f"~{saved:.0f} s against ~{COLD_COMPILE_S:.0f} s of cold compile; "
                          f"this run's timing is recorded for the next")
        return Choice("reference", "no timings measured on this machine for this recipe, "
                      "model and batch yet: starts on the reference (nothing to compile) and "
                      "times its first steps to decide whether compiling pays for the rest",
                      probe=True)
    ref_ms, comp_ms, startup, how = rates
    times = _times(rates, steps)                # one read of the ledger, not two
    best = min(times, key=times.get)
    return Choice(best, f"{steps} steps: compiled ~{times['compiled']:.0f} s (start-up "
                        f"{startup:.0f} s + {comp_ms:.0f} ms/step) vs reference "
                        f"~{times['reference']:.0f} s ({ref_ms:.0f} ms/step), {how}")
