"""Which device's code path runs: CUDA's on a CUDA device, and anywhere inside ``cuda_path()``.

A few choices depend on the device, not on the numbers: the dtype a quantized operand is
produced in and the GEMM that multiplies it (``quant/gemm.py``), and how a per-call host tensor
reaches the device (``rng.to_device``). ``cuda_path()`` makes CPU tensors take the CUDA
branches, so that a CPU can trace what one step would launch on a GPU
(``quant/launches.py``). It is scoped (a context variable, reset on exit) and changes no
value: the branches compute the same numbers in other dtypes.
"""
from __future__ import annotations

import contextlib
import contextvars

import torch

_CUDA_PATH = contextvars.ContextVar("cuda_path", default=False)


@contextlib.contextmanager
def cuda_path():
    """Inside the block, tensors on any device take the CUDA branches (``on_cuda``)."""
    token = _CUDA_PATH.set(True)
    try:
        yield
    finally:
        _CUDA_PATH.reset(token)


def on_cuda(device: torch.device) -> bool:
    """Whether code on ``device`` takes the CUDA branches: a CUDA device, or ``cuda_path``."""
    return device.type == "cuda" or _CUDA_PATH.get()
