"""Backends: who computes a quantized GEMM operand, and the GEMM's epilogue.

Every backend implements ``operand(x, spec, seed=, stream=, signs=, local_dtype=)``,
returning ``(local, amax)`` exactly as ``formats.fake_quantize_parts`` does (local: element x
block scale; amax: NVFP4's tensor amax or None). ``local`` is fp32, or bf16 on request
for FP4 formats, where bf16 holds it exactly (``gemm.local_dtype``): the triton kernels write
bf16 directly, the others cast. The GEMMs themselves are ordinary matmuls in ``gemm.py``
whatever the backend; ``epilogue(y, Epilogue)`` scales and rounds their FP32 output:
the reference's torch ops, or with ``triton`` the same bits in one kernel.

    reference  eager PyTorch: the executable specification (``formats/``)
    compiled   the reference compiled by inductor, bit-identical to it (compiled.py; CPU)
    triton     fused kernels from the ``nvfp4_kernels`` package (``kernels/``, CUDA only)
    auto       triton on CUDA, else compiled; self-tested, falling back to the reference
               (a training run on a CPU first picks reference or compiled by cost: cost.py)

A backend other than ``reference`` must pass ``self_test`` before training: on small
adversarial tensors, for every quantizer the recipe uses, its output must equal the
reference's byte for byte, and its stochastic rounding must be unbiased on a tensor where
round-to-nearest is not (so an all-zero or a round-to-nearest "SR" fails even where the
reference itself were wrong).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import warnings
from typing import NamedTuple

import torch

from ..formats import QuantSpec, Stream, fake_quantize_parts
from ..formats.e2m1 import FP4_MAX
from ..formats.nvfp4 import alpha_divisor, gemm_alpha
from ..formats.quantizer import check_local_dtype
from . import compiled, packaged


class Epilogue(NamedTuple):
    """What a quantized GEMM does to its FP32 output Y: Y times NVFP4's alpha (``amaxes``:
    those of its NVFP4 operands, ``limits``: their E4M3 limits), rounded to ``round_to`` (the
    compute dtype) and stored in ``dtype`` (the dtype the caller keeps: dX's input dtype, dW's
    master weight's)."""

    amaxes: tuple[torch.Tensor, ...]
    limits: tuple[int, ...]
    round_to: torch.dtype
    dtype: torch.dtype

    def apply(self, y: torch.Tensor) -> torch.Tensor:
        """The reference: torch ops, a launch each on a GPU (a backend may fuse them)."""
        if len(self.amaxes) == 2:
            y = y * gemm_alpha(*self.amaxes, *self.limits)
        elif self.amaxes:
            y = y * gemm_alpha(self.amaxes[0], limit_a=self.limits[0])
        return y.to(self.round_to).to(self.dtype)


class BackendError(RuntimeError):
    """A backend is unavailable or failed its self-test."""


class Backend:
    name = "reference"

    def operand(self, x: torch.Tensor, spec: QuantSpec, *, seed: int = 0,
                stream: Stream | None = None, signs: torch.Tensor | None = None,
                local_dtype: torch.dtype = torch.float32):
        check_local_dtype(spec, local_dtype)
        local, amax = self._parts(x, spec, seed, stream, signs)
        return local.to(local_dtype), amax

    def _parts(self, x, spec, seed, stream, signs):
        return fake_quantize_parts(x, spec, seed=seed, stream=stream, signs=signs)

    def epilogue(self, y: torch.Tensor, epilogue: Epilogue) -> torch.Tensor:
        """A quantized GEMM's FP32 output through its ``Epilogue``."""
        return epilogue.apply(y)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class CompiledBackend(Backend):
    name = "compiled"

    def _parts(self, x, spec, seed, stream, signs):
        return compiled.fake_quantize_parts(x, spec, seed=seed, stream=stream, signs=signs)


class TritonBackend(Backend):
    name = "triton"

    def __init__(self):
        # TRITON_INTERPRET=1 runs the kernels on the CPU (slowly): how CI tests them
        if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
            raise BackendError("backend=triton needs a CUDA device (or TRITON_INTERPRET=1, "
                               "Triton's slow CPU interpreter); use compiled on the CPU")
        if importlib.util.find_spec("nvfp4_kernels") is None:
            raise BackendError("backend=triton needs the nvfp4_kernels package (kernels/), "
                               "which is not installed")
        import nvfp4_kernels
        import nvfp4_kernels.epilogue

        self._kernels = nvfp4_kernels
        self._fallbacks: set = set()

    def operand(self, x, spec, *, seed=0, stream=None, signs=None, local_dtype=torch.float32):
        if spec not in self._fallbacks and not self._kernels.supported(spec):
            self._fallbacks.add(spec)
            warnings.warn(f"backend triton: no fused kernel for {spec}; the reference "
                          "computes it", stacklevel=2)
        return self._kernels.operand(x, spec, seed=seed, stream=stream, signs=signs,
                                     local_dtype=local_dtype)

    def epilogue(self, y, epilogue):
        """One launch (``nvfp4_kernels.epilogue``) where the kernel covers it, else the
        reference's ops."""
        kernel = self._kernels.epilogue
        if not kernel.supports(y, epilogue.amaxes, epilogue.round_to, epilogue.dtype):
            return epilogue.apply(y)
        return kernel.gemm_epilogue(y, epilogue.amaxes, alpha_divisor(*epilogue.limits),
                                    epilogue.round_to, epilogue.dtype)


def _sample(spec: QuantSpec, device, dtype: torch.dtype) -> torch.Tensor:
    """[n, n] with normal bulk, heavy outliers, zero blocks, ties and tiny values."""
    n = max(64, 2 * max(spec.block or (16,)), spec.rht.size if spec.rht else 0)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, n, generator=g) * torch.exp(2 * torch.randn(n, 1, generator=g))
    x[:, :16] = 0.0                                            # zero blocks
    x[0, 16:] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0]).repeat(n // 8)[
        : n - 16]                                              # E2M1 ties at scale 1
    x[1] *= 1e-30                                              # subnormal block scales
    x[2, 3] = 1e4                                              # an outlier
    return x.to(device=device, dtype=dtype)


def _biased_for_rne(spec: QuantSpec, device) -> tuple[torch.Tensor, float]:
    """A tensor whose blocks all hold one 6.0 (scale 1) and elements 1.2 otherwise, and the
    expected SR value of 1.2 on the E2M1 grid (RNE gives 1.0)."""
    n = max(64, 2 * max(spec.block))
    i = torch.arange(n)
    if spec.layout.kind == "2d":
        top = ((i[:, None] % spec.block[0]) == 0) & ((i[None, :] % spec.block[0]) == 0)
    else:
        idx = i[:, None] if spec.layout.axis % 2 == 0 else i[None, :]
        top = (idx % spec.layout.size == 0).expand(n, n)
    x = torch.where(top, FP4_MAX, 1.2)
    # 1.2 lies 0.4 of the way from 1.0 to 1.5; hw8 rounds up with probability floor(256 f)/256
    p_up = 0.4 if spec.sr_mode == "exact" else math.floor(256 * 0.4) / 256
    return x.to(device), 1.0 + 0.5 * p_up


_BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16}


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal dtype and bit patterns (so -0.0 != +0.0; the samples are finite)."""
    return a.dtype == b.dtype and torch.equal(a.view(_BITS[a.dtype]), b.view(_BITS[b.dtype]))


INPUT_DTYPES = (torch.float32, torch.bfloat16)


def self_test(backend: Backend, specs, device: torch.device | str = "cpu",
              input_dtypes=INPUT_DTYPES) -> None:
    """Raise BackendError unless ``backend`` matches the reference on every spec, for inputs
    of ``input_dtypes`` (a run that never quantizes a bf16 tensor need not compile for one:
    each dtype is another graph to compile)."""
    with torch.no_grad():  # as QuantGemm quantizes: then training reuses the compiled graphs
        _self_test(backend, specs, device, input_dtypes)


def _self_test(backend: Backend, specs, device, input_dtypes) -> None:
    reference = Backend()
    for spec in specs:
        for dtype in input_dtypes:
            x = _sample(spec, device, dtype)
            stream = Stream(layer=3, step=7, gemm=2, operand=1)
            dtypes = (torch.float32, torch.bfloat16) if spec.bf16_exact else (torch.float32,)
            for local_dtype in dtypes:
                got = backend.operand(x, spec, seed=11, stream=stream, local_dtype=local_dtype)
                want = reference.operand(x, spec, seed=11, stream=stream,
                                         local_dtype=local_dtype)
                for name, a, b in (("values", got[0], want[0]),
                                   ("tensor amax", got[1], want[1])):
                    if (a is None) != (b is None) or (a is not None and not _same(a, b)):
                        raise BackendError(f"backend {backend.name}: {name} differ from the "
                                           f"reference for {spec} on {dtype} input "
                                           f"({local_dtype} local)")
        if spec.rounding == "sr":
            _check_unbiased(backend, spec, device)
    _check_epilogue(backend, device)


def _check_epilogue(backend: Backend, device) -> None:
    """The backend's GEMM epilogue against the reference's ops: alphas from zero, one and
    two amaxes (4/6's limit included), BF16 ties and subnormals, each rounding and store."""
    g = torch.Generator().manual_seed(99)
    y = torch.randn(64, 48, generator=g) * torch.exp(8 * torch.randn(64, 1, generator=g))
    y[0, :4] = torch.tensor([1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 2.0 ** -130, -0.0])
    y = y.to(device)
    amaxes = tuple(torch.tensor(v, device=device) for v in (3.0e3, 0.7071))
    for n, limits in ((0, ()), (1, (448,)), (2, (448, 256))):
        for round_to, dtype in ((torch.bfloat16, torch.bfloat16),
                                (torch.bfloat16, torch.float32),
                                (torch.float32, torch.float32)):
            e = Epilogue(amaxes[:n], limits, round_to, dtype)
            if not _same(backend.epilogue(y, e), e.apply(y)):
                raise BackendError(f"backend {backend.name}: the GEMM epilogue differs from "
                                   f"the reference ({n} amaxes, {round_to} -> {dtype})")


def _check_unbiased(backend: Backend, spec: QuantSpec, device, draws: int = 8) -> None:
    spec = dataclasses.replace(spec, rht=None)  # the probe is built for the unrotated grid
    x, expected = _biased_for_rne(spec, device)
    low = x != FP4_MAX
    total = 0.0
    for s in range(draws):
        local, amax = backend.operand(x, spec, seed=s, stream=Stream(step=s))
        total += float((local if amax is None else local * gemm_alpha(amax))[low].sum())
    count = int(low.sum()) * draws
    mean = total / count
    # each draw is 1.0 or 1.5: variance 0.25 p (1 - p) <= 0.0625; allow 6 standard errors
    bound = 6 * math.sqrt(0.0625 / count)
    if abs(mean - expected) > bound:
        raise BackendError(f"backend {backend.name}: stochastic rounding is biased for {spec}: "
                           f"mean {mean:.5f} where {expected:.5f} +- {bound:.5f} is expected "
                           f"(round-to-nearest gives 1.0, an all-zero kernel 0.0)")


def make_backend(name: str) -> Backend:
    if name == "reference":
        return Backend()
    if name == "compiled":
        return CompiledBackend()
    if name == "triton":
        return TritonBackend()
    raise ValueError(f"backend={name!r} is not one of auto, reference, compiled, triton")


def resolve(name: str, specs, device: torch.device | str = "cpu",
            input_dtypes=INPUT_DTYPES) -> Backend:
    """The backend for ``name`` on ``device``, self-tested on ``specs`` (the recipe's) with
    inputs of ``input_dtypes``: an explicitly named backend that fails raises; ``auto`` warns
    and falls back to the next candidate (CUDA: triton -> reference; CPU: compiled ->
    reference)."""
    specs = list(dict.fromkeys(specs))
    if name != "auto":
        return _checked(name, specs, device, input_dtypes)
    for candidate in ["triton"] if torch.device(device).type == "cuda" else ["compiled"]:
        try:
            return _checked(candidate, specs, device, input_dtypes)
        except BackendError as err:
            warnings.warn(f"backend auto: skipping {candidate}: {err}", stacklevel=2)
    return Backend()


def _checked(name: str, specs: list[QuantSpec], device, input_dtypes) -> Backend:
    """Backend ``name``, self-tested here unless it is the reference. ``compiled`` is refused
    on CUDA, where inductor's GPU code of the quantizers was not bit-exact on an H200
    (benchmarks/RESULTS.md, GPU check) and a self-test on small samples may not show it, and
    under a torch older than the one it is checked on (``packaged.MIN_TORCH``)."""
    if name == "compiled" and torch.device(device).type == "cuda":
        raise BackendError("backend=compiled is not bit-exact on CUDA (benchmarks/RESULTS.md, "
                           "GPU check); use backend=triton or auto")
    if name == "compiled" and (why := packaged.torch_refusal("backend")):
        raise BackendError(why)
    backend = make_backend(name)
    if name != "reference":
        self_test(backend, specs, device, input_dtypes)
    return backend
