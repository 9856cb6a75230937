"""What a step would launch on a CUDA device, counted on the CPU.

``trace(step, device_tensors)`` runs ``step`` once on CPU tensors inside
``formats.device.cuda_path()``, so the code takes the branches it takes on CUDA (FP4 locals in
BF16 and the BF16 GEMM with FP32 output, ``gemm.local_dtype`` / ``gemm.gemm``; the host-to-device
copy of ``rng.to_device``), and records every aten op that reaches dispatch (a
``TorchDispatchMode``: composite ops arrive decomposed, as CUDA runs them) and every Triton
kernel launch. Each is one ``Op`` of a ``Kind``:

    launches (a CUDA kernel or copy each)
      triton   a Triton kernel launch (autotuning's trial runs are not counted)
      gemm     a matmul (mm, addmm, bmm, ...), with its operands' and output's dtypes
      compute  any other op that computes or fills (in-place ones included)
      copy     _to_copy, clone, copy_, a read back to the host, a host-to-device copy
    not launches
      view     an op whose schema returns an alias of an input (t, view, detach, ...)
      alloc    empty, empty_strided, new_empty, ...: memory, no kernel
      meta     an op that returns no tensor and reads no data (a size, the device)
      host     an op on host tensors only: the CPU runs it

Host and device: a tensor made from Python data (``torch.tensor``: the stochastic-rounding
keys, the RHT sign vectors) is a host tensor, and so is what is computed from host tensors
only; the step's inputs, what a factory op (zeros, full, ...) makes and what is computed from a
device tensor are device tensors. ``rng.to_device`` moves a host tensor to the device (inside
``cuda_path`` a non-blocking ``_to_copy`` naming the device): one ``h2d copy``; of a tensor
already there, nothing. A host tensor (not 0-d: CUDA ops take those as scalars) read by a
device op or kernel without it counts one ``h2d copy (implied)``, the first time.

The BF16 GEMM with FP32 output (``aten.mm.dtype``) has no CPU kernel: it is recorded as it is
and computed by an FP32 matmul (the same exact products, FP32 sums). A Triton kernel runs with
recording off (the interpreter's own tensor ops are not the kernel's).

Not seen: the kernels one aten op launches internally (counted as one; cuBLAS may split a
GEMM), autotuning and compilation, the allocator, host time. An estimate until a GPU profile
confirms it.
"""
from __future__ import annotations

import contextlib
import enum
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils.weak import WeakIdKeyDictionary

from ..formats.device import cuda_path
from .gemm import full_fp32
from .linear import device_signs

aten = torch.ops.aten


class Kind(enum.StrEnum):
    """What a recorded op is (module docstring); ``LAUNCHES`` are the kinds that launch."""

    triton = "triton"
    gemm = "gemm"
    compute = "compute"
    copy = "copy"
    view = "view"
    alloc = "alloc"
    meta = "meta"
    host = "host"


LAUNCHES = (Kind.triton, Kind.gemm, Kind.compute, Kind.copy)

_GEMMS = {aten.mm, aten.addmm, aten.bmm, aten.baddbmm, aten.addbmm, aten.mv, aten.addmv,
          aten.dot, aten._scaled_mm}
_COPIES = {aten._to_copy, aten.clone, aten.copy_, aten._copy_from, aten._copy_from_and_resize}
_ALLOCATIONS = {aten.empty, aten.empty_strided, aten.empty_like, aten.new_empty,
                aten.new_empty_strided}
# no kernel, though the schema returns a new tensor: a view whose autograd is not a view's
_NO_KERNEL = {aten._unsafe_view}
# ops that return no tensor but read device memory back to the host (a copy and a sync)
_READ_BACK = {aten._local_scalar_dense, aten.equal, aten.is_nonzero}
H2D = "h2d copy"
H2D_IMPLIED = "h2d copy (implied)"
NO_MOVE = "to_device of a device tensor (no-op)"


@dataclass(frozen=True)
class TensorMeta:
    """A GEMM operand's or output's dtype and shape."""

    dtype: torch.dtype
    shape: tuple[int, ...]

    def __str__(self) -> str:
        return f"{str(self.dtype).removeprefix('torch.')}{list(self.shape)}"


@dataclass(frozen=True)
class Op:
    """One recorded op: its kind, its name (aten overload or Triton kernel), and for a GEMM
    its tensor inputs and output."""

    kind: Kind
    name: str
    inputs: tuple[TensorMeta, ...] = ()
    output: TensorMeta | None = None

    def describe(self) -> str:
        if self.output is None:
            return self.name
        return f"{self.name}: {' x '.join(map(str, self.inputs))} -> {self.output}"


@dataclass(frozen=True)
class Trace:
    """The ops of one traced step, in order."""

    ops: tuple[Op, ...]

    def count(self, *kinds: Kind) -> int:
        """Ops of the given kinds (none given: every launch)."""
        kinds = kinds or LAUNCHES
        return sum(op.kind in kinds for op in self.ops)

    @property
    def launches(self) -> int:
        return self.count()

    def names(self, *kinds: Kind) -> Counter:
        """How often each op of the given kinds (none given: launches) ran, by name."""
        kinds = kinds or LAUNCHES
        return Counter(op.name for op in self.ops if op.kind in kinds)

    @property
    def gemms(self) -> tuple[Op, ...]:
        return tuple(op for op in self.ops if op.kind == Kind.gemm)


def _mm_dtype(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """``aten.mm.dtype`` where it has no kernel: exact products of the narrow operands, FP32
    sums."""
    with full_fp32(a.device):
        return (a.float() @ b.float()).to(out_dtype)


_STAND_INS = {aten.mm.dtype: _mm_dtype}


def _meta(t: torch.Tensor) -> TensorMeta:
    return TensorMeta(t.dtype, tuple(t.shape))


def _returns_alias(func) -> bool:
    return any(r.alias_info is not None and not r.alias_info.is_write
               for r in func._schema.returns)


class _Recorder(TorchDispatchMode):
    """Records each aten op reaching dispatch as an ``Op`` (module docstring)."""

    def __init__(self, device_tensors: Iterable[torch.Tensor]):
        super().__init__()
        self.ops: list[Op] = []
        self.device = WeakIdKeyDictionary()
        for t in device_tensors:
            self.device[t] = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        run = _STAND_INS.get(func) if not any(t.is_cuda for t in inputs) else None
        out = (run or func)(*args, **kwargs)
        outputs = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        kind, name = self._classify(func, inputs, outputs, kwargs)
        if kind != Kind.host:
            if name != H2D:
                self.implied_copies(inputs)
            for t in outputs:
                self.device[t] = True
        gemm = kind == Kind.gemm
        self.ops.append(Op(kind, name, tuple(map(_meta, inputs)) if gemm else (),
                           _meta(outputs[0]) if gemm else None))
        return out

    def _classify(self, func, inputs, outputs, kwargs) -> tuple[Kind, str]:
        packet, name = func.overloadpacket, str(func)
        if packet is aten._to_copy and kwargs.get("non_blocking") and "device" in kwargs:
            # rng.to_device inside cuda_path: from the host, the copy to the device; of a
            # device tensor, nothing (on CUDA, .to returns the tensor itself)
            return (Kind.view, NO_MOVE) if inputs[0] in self.device else (Kind.copy, H2D)
        if inputs and not any(t in self.device for t in inputs):
            return Kind.host, name
        if not outputs:
            return (Kind.copy if packet in _READ_BACK else Kind.meta), name
        if packet in _ALLOCATIONS:
            return Kind.alloc, name
        if _returns_alias(func) or packet in _NO_KERNEL:
            return Kind.view, name
        if packet in _GEMMS:
            return Kind.gemm, name
        return (Kind.copy if packet in _COPIES else Kind.compute), name

    def implied_copies(self, tensors: Iterable[torch.Tensor]) -> None:
        """Host tensors a device op or kernel reads without ``rng.to_device``: each but a 0-d
        one (a CUDA op takes that as a scalar) must have been copied to the device once."""
        for t in tensors:
            if t not in self.device and t.dim() > 0:
                self.device[t] = True
                self.ops.append(Op(Kind.copy, H2D_IMPLIED))

    def triton(self, kernel, args) -> None:
        self.implied_copies(a for a in args if isinstance(a, torch.Tensor))
        self.ops.append(Op(Kind.triton, _kernel_name(kernel)))


def _kernel_name(kernel) -> str:
    """module.function of a Triton kernel (jitted, interpreted or autotuned)."""
    fn = kernel
    while hasattr(fn, "fn"):
        fn = fn.fn
    return f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}"


@contextlib.contextmanager
def _triton_launches(recorder: _Recorder):
    """Every ``kernel[grid](...)`` inside the block is recorded, then run with recording off
    (the interpreter's own tensor ops are not the kernel's launches)."""
    try:
        from nvfp4_kernels.trace import launches
    except ImportError:  # no Triton, so no kernel of ours can launch
        yield
        return
    with launches(recorder.triton, _disable_current_modes):
        yield


def trace(step: Callable[[], object], device_tensors: Iterable[torch.Tensor],
          runs: int = 1) -> Trace:
    """The ops ``step()`` would run on CUDA, ``device_tensors`` standing for its device
    tensors (module docstring): those of the last of ``runs`` calls, the calls before it
    filling what a run keeps on the device from step to step (constants, cached vectors)."""
    recorder = _Recorder(device_tensors)
    with cuda_path(), _triton_launches(recorder), recorder:
        for _ in range(runs - 1):
            step()
        recorder.ops.clear()
        step()
    return Trace(tuple(recorder.ops))


def linear_step(layer: nn.Linear, tokens: int, x_dtype: torch.dtype = torch.bfloat16,
                seed: int = 0) -> Trace:
    """A training step of ``layer`` (stand-alone, CPU) after a first one, traced: forward of
    x [tokens, in] under bf16 autocast, the trainer's, then backward of a bf16 dY into an
    existing ``.grad`` of each parameter, so gradient accumulation's add is counted. x is a
    leaf without a grad: autograd hands dX on without a copy, as to the layer below in a
    model. A quantized layer's step counter advances between the two, as in training, so
    what changes per step (SR keys, a per-step sign vector) is new in the traced one."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, layer.in_features, generator=g).to(x_dtype).requires_grad_()
    dy = torch.randn(tokens, layer.out_features, generator=g).to(torch.bfloat16)
    params = list(layer.parameters())
    for p in params:
        p.grad = torch.zeros_like(p)

    state = getattr(layer, "state", None)  # a QuantLinear's QuantState
    # filled again by the first step, so that the recorder knows the cached vectors as the
    # device tensors they are on CUDA (one cached by an earlier trace would be a host tensor)
    device_signs.cache_clear()

    def step():
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            y = layer(x)
        y.backward(dy)
        x.grad = None  # handed on to the layer below, never accumulated here
        if state is not None:
            state.step += 1
    return trace(step, [x, dy, *params, *(p.grad for p in params)], runs=2)
