"""The machine class: what decides whether two CPU runs of one config and seed are bit-equal.

A CPU run's float sums are ordered by the kernels torch dispatches to. Those depend on the
instruction set torch picks (``torch.backends.cpu.get_cpu_capability()``: AVX512, AVX2,
DEFAULT) and, within one instruction set, on the processor: oneDNN and MKL choose their code
paths by vendor and family, and an Intel and an AMD AVX512 box ran the quickstart to NVFP4
losses 1.0% apart (notebooks/LOG.md). So the class is

    architecture, instruction set, vendor, CPU family        x86_64 AVX512, AMD family 25

and beside it the versions of the packages that compute (torch, numpy). Within one class and
one set of those versions two runs give the same bits; across classes they agree to ~1e-4 relative
over the first steps and then drift apart as two seeds would. ``info`` prints the class, every
``summary.json`` records it (``machine_class``), and the golden-trajectory test keeps one file
per class (tests/golden/).
"""
from __future__ import annotations

import importlib
import platform
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

VENDORS = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}
VERSIONED = ("torch", "numpy")        # their kernels compute a run: imported for __version__
# the distributions that run it (training loop, config, tokenizer, GPU kernels), from their
# metadata without importing them; one not installed (triton on a CPU box) is left out
RUNNING = ("lightning", "hydra-core", "tokenizers", "triton")


@dataclass(frozen=True)
class MachineClass:
    """Architecture, torch's CPU instruction set, vendor and CPU family."""

    arch: str
    isa: str
    vendor: str
    family: str

    def __str__(self) -> str:
        return f"{self.arch} {self.isa}, {self.vendor} family {self.family}"

    @classmethod
    def of(cls, info: dict[str, str], arch: str, isa: str) -> MachineClass:
        """The class of a processor described by its ``cpuinfo`` fields."""
        vendor = info.get("vendor_id") or "unknown"
        return cls(arch, isa, VENDORS.get(vendor, vendor), info.get("cpu family", "unknown"))

    @property
    def slug(self) -> str:
        """``x86_64-avx512-amd-25``: a file name."""
        return "-".join(p.lower().replace(" ", "_")
                        for p in (self.arch, self.isa, self.vendor, self.family))


@dataclass(frozen=True)
class Machine:
    """This process's machine: its class, the processor's name and the threads torch uses."""

    cls: MachineClass
    processor: str
    threads: int

    @classmethod
    def here(cls) -> Machine:
        import torch

        info = cpuinfo()
        return cls(MachineClass.of(info, platform.machine(),
                                   torch.backends.cpu.get_cpu_capability()),
                   info.get("model name") or platform.processor() or "unknown CPU",
                   torch.get_num_threads())

    def describe(self) -> str:
        """``x86_64 AVX512, AMD EPYC, 1 threads``: the device column of every run table."""
        return f"{self.cls.arch} {self.cls.isa}, {self.processor}, {self.threads} threads"


def cpuinfo(path: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` ({} where there is none)."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    first = text.split("\n\n", 1)[0]
    fields = (line.partition(":") for line in first.splitlines())
    return {key.strip(): value.strip() for key, colon, value in fields if colon}


def versions() -> dict[str, str]:
    """Python's version, nvfp4-lab's, and those of the packages that compute and run a run.
    The computing ones by their own ``__version__``, which names their build where the
    distribution's does not (torch from PyPI: 2.11.0+cu130, where its metadata says 2.11.0)."""
    from .. import __version__

    found = {"python": platform.python_version(), "nvfp4-lab": __version__,
             **{p: importlib.import_module(p).__version__ for p in VERSIONED}}
    for dist in RUNNING:
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            pass
    return found
