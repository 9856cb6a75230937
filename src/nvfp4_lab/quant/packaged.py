"""Compiled quantizers as AOTInductor packages: built once per machine, loaded in every process.

``torch.compile`` keeps inductor's kernels on disk, but every new process traces the pipeline
with dynamo again before it can look them up, most of a warm start-up
(benchmarks/RESULTS.md, Where the compiled backend's bars stand). AOTInductor takes the same
graph (``torch.export`` of the same function) through the same lowering, with the same
options, into one shared library in a
``.pt2`` file, which a later process loads with nothing traced (benchmarks/RESULTS.md,
Compiled quantizers as AOTInductor packages).

    store: <inductor cache dir>/nvfp4_lab_aoti/<key>.pt2     (beside torch.compile's caches)
    key:   what is computed (function, spec), input dtype and rank, which optional inputs
           are given, torch and Python versions, the CPU's vector ISA and a hash of the
           code the graph is traced from (``formats/``, this module and compiled.py, less
           comments and docstrings), so an edit to it must miss rather than run a stale
           library, while an edit to its prose keeps the packages built.

One package serves every input of its dtype and rank whose sizes are all whole multiples of
``multiple(spec)`` (the block, the RHT size, FP4's element pairs): those sizes are symbols in
the graph (``torch.export.Dim``). Every other input (a partial block, a non-contiguous view,
one that records a gradient, a CUDA tensor; any input under a torch older than
``MIN_TORCH``) runs the ``fallback`` given, ``torch.compile`` of the same function, as does
a build that fails (with a warning). Two processes that build the same package at once each
write their own file and rename it into place; either serves.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType

import torch
from torch.torch_version import TorchVersion

from ..cache import cache_root
from ..formats.spec import FP4_FORMATS, QuantSpec

# inductor's options for both paths; read-only: aoti_compile_and_package adds its own keys to
# the dict it is given, which would change the package key after a process's first build
OPTIONS = MappingProxyType({"emulate_precision_casts": True})
# inputs whose sizes have larger products take the fallback: the SR index is int32 up to here
_MAX_NUMEL = torch.iinfo(torch.int32).max
# the compiled backend's torch, the one CI checks it on: 2.11's AOTInductor fails to compile
# the C++ of FP8 scale buffers (``at::Float8_e4m3fn`` undeclared), a package it built crashed
# the process that loaded it on an H200 machine (benchmarks/RESULTS.md, GPU check), and the
# C++ inductor of 2.11 and 2.12 ignores emulate_precision_casts: a fused .to(bfloat16) stays
# fp32, so an RHT output's amax and block scales change on bf16 input (2.13 honours it;
# notebooks/LOG.md, 2026-12-06 (session 28)); backends.resolve refuses it below this
MIN_TORCH = "2.13"


def torch_checked(version: str | None = None) -> bool:
    """Whether torch ``version`` (default: this one) is one the compiled backend is checked on
    (else no package is built, and the backend is refused)."""
    return TorchVersion(version or torch.__version__) >= MIN_TORCH


def torch_refusal(key: str) -> str | None:
    """Why config ``key`` (``backend``, ``quant.backend``) may not be ``compiled`` under this
    torch, in one line; None where it may."""
    if torch_checked():
        return None
    return (f"{key}=compiled needs torch >= {MIN_TORCH}, here {torch.__version__}, whose "
            f"inductor is not bit-exact on every quantizer (quant/packaged.py); use "
            f"{key}=auto or reference")


def multiple(spec: QuantSpec) -> int:
    """Every size of an input a package serves is a multiple of this: the block and RHT sizes
    (powers of two, so the largest is their least common multiple) and 2 for FP4's pairs."""
    sizes = [*(spec.block or ()), spec.rht.size if spec.rht else 1,
             2 if spec.fmt in FP4_FORMATS else 1]
    return max(sizes)


@functools.cache
def source_hash() -> str:
    """sha256 of the code a package's graph is traced from: ``formats/``, this module and
    compiled.py."""
    here = Path(__file__).parent
    h = hashlib.sha256()
    for path in [*sorted((here.parent / "formats").glob("*.py")), Path(__file__),
                 here / "compiled.py"]:
        h.update(path.name.encode() + b"\0" + code(path.read_text()).encode())
    return h.hexdigest()


_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def code(source: str) -> str:
    """Python ``source`` as its syntax tree, without comments and docstrings: what it runs."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, _DOCUMENTED) and ast.get_docstring(node, clean=False) is not None:
            node.body = node.body[1:]
    return ast.dump(tree)


def compile_cache_dir() -> Path:
    """Inductor's caches and packaged.py's packages: ``$TORCHINDUCTOR_CACHE_DIR`` if set, else
    ``cache_root()/inductor``, shared by every run on the machine and, unlike inductor's
    default under /tmp, kept when /tmp is cleaned."""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    return cache_root() / "inductor"


@functools.cache
def use_compile_cache() -> Path:
    """Point inductor at ``compile_cache_dir()`` before it first compiles, and return it: its
    caches through ``TORCHINDUCTOR_CACHE_DIR``, and the precompiled headers of its C++ builds,
    which torch 2.13 puts in its own default (``torchinductor_<user>`` in the system's temp
    folder, ``codecache._HEADER_DIR``) whatever that variable says."""
    root = compile_cache_dir()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(root)
    from torch._inductor import codecache

    if hasattr(codecache, "_HEADER_DIR"):   # torch 2.13's name; another torch keeps its own
        codecache._HEADER_DIR = str(root / "precompiled_headers")
        codecache._HEADER_LOCK_DIR = str(root / "precompiled_headers" / "locks")
    return root


def store_dir() -> Path:
    return compile_cache_dir() / "nvfp4_lab_aoti"


class _Graph(torch.nn.Module):
    """fn as a module: what torch.export takes."""

    def __init__(self, fn: Callable):
        super().__init__()
        self.fn = fn

    def forward(self, x, key, signs):
        return self.fn(x, key, signs)


class PackagedQuantizer:
    """``fn(x, key, signs)`` from an AOTInductor package per (dtype, rank, optional inputs)
    where x is whole blocks, else ``fallback(x, key, signs)``.

    fn: the pipeline with its spec bound; name: what fn computes (its spec's repr included),
    part of the package key; fallback: the same function compiled for any input.
    """

    def __init__(self, fn: Callable, spec: QuantSpec, name: str, fallback: Callable):
        self.fn, self.name, self.fallback = fn, name, fallback
        self.multiple = multiple(spec)
        self.packages = torch_checked()  # once, not on every call
        self.runners: dict[tuple, Callable | None] = {}  # None: this signature falls back

    def __call__(self, x: torch.Tensor, key, signs):
        runner = self._runner(x, key, signs) if self.serves(x) else None
        if runner is None:
            return self.fallback(x, key, signs)
        return tuple(runner(x, key, signs))

    def serves(self, x: torch.Tensor) -> bool:
        """Whether x can take a package: whole blocks, contiguous, CPU, nothing to record,
        a torch that builds packages."""
        return (self.packages and x.device.type == "cpu" and x.dim() > 0 and x.is_contiguous()
                and 0 < x.numel() <= _MAX_NUMEL
                and all(n % self.multiple == 0 for n in x.shape)
                and not (x.requires_grad and torch.is_grad_enabled()))

    def _runner(self, x, key, signs):
        signature = (x.dtype, x.dim(), key is None, signs is None)
        if signature not in self.runners:
            self.runners[signature] = self._load_or_build(signature, key, signs)
        return self.runners[signature]

    def _path(self, signature) -> Path:
        isa = torch.backends.cpu.get_cpu_capability()
        text = "|".join(map(str, (self.name, *signature, torch.__version__, sys.version_info[:3],
                                  isa, dict(OPTIONS), source_hash())))
        return store_dir() / f"{hashlib.sha256(text.encode()).hexdigest()[:32]}.pt2"

    def _load_or_build(self, signature, key, signs):
        path = self._path(signature)
        if path.exists():
            try:
                return torch._inductor.aoti_load_package(str(path))
            except Exception as err:  # noqa: BLE001 - a bad file is rebuilt
                warnings.warn(f"compiled quantizer package {path} not loaded ({err}); "
                              "building it again", stacklevel=4)
        try:
            self._build(path, signature, key, signs)
            return torch._inductor.aoti_load_package(str(path))
        except Exception as err:  # noqa: BLE001 - the fallback computes the same bits
            warnings.warn(f"compiled quantizer {self.name}: no AOTInductor package for "
                          f"{signature[0]} rank {signature[1]} ({type(err).__name__}: {err}); "
                          "using torch.compile, which re-traces in every process (same "
                          "numbers, slower start-up)", stacklevel=4)
            return None

    def _build(self, path: Path, signature, key, signs) -> None:
        dtype, rank = signature[:2]
        # an example of 2 whole multiples per size: a size of 1 multiple would be specialised
        example = torch.zeros([2 * self.multiple] * rank, dtype=dtype)
        dims = {d: self.multiple * torch.export.Dim(f"blocks{d}", min=1,
                                                     max=_MAX_NUMEL // self.multiple)
                if self.multiple > 1 else torch.export.Dim(f"size{d}", min=1)
                for d in range(rank)}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.pt2")
        try:
            with warnings.catch_warnings():  # torch's own deprecations in export and packaging
                warnings.simplefilter("ignore", FutureWarning)
                program = torch.export.export(_Graph(self.fn), (example, key, signs),
                                              dynamic_shapes=(dims, None, None), strict=False)
                torch._inductor.aoti_compile_and_package(program, package_path=str(tmp),
                                                         inductor_configs=dict(OPTIONS))
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)  # a failed build leaves nothing behind
