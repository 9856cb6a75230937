"""Counter-based random bits for stochastic rounding and random Hadamard signs.

Stochastic rounding needs random bits that are a pure function of *where* they are used, so
that a run is bit-reproducible across backends (eager, torch.compile, Triton), machines, and
resumes. The PyTorch global generator gives none of that: its stream depends on how many
draws happened before. Here every element's bits are

    bits(key, i) = fmix32(fmix32(i XOR k0) + k1)        (uint32 arithmetic, wrap-around)

where i is the element's row-major index in the tensor as passed, and (k0, k1) is a 64-bit
key mixed on the host from the seed and the stream ids (layer, step, gemm, operand, call:
``spec.Stream``).
fmix32 is MurmurHash3's finaliser: a bijection on uint32 with full avalanche. Injecting the
key both before and after the first finaliser keeps different keys from producing shifted
copies of one sequence (which `fmix32(i + k)` alone would).

PyTorch has no wrapping uint32 arithmetic (its uint32 tensors lack shifts and adds), so the
tensor version holds each uint32 as the int32 with the same bits. Multiplies and adds then
wrap modulo 2^32 in two's complement, which gives the uint32 result's bits: the vector units
ATen and torch.compile use (``vpmulld``, ``vpaddd``) and the scalar ``imul``/``add`` wrap by
definition. C++ calls signed overflow undefined, so the bits are checked against Python
integers (``fmix32_int``) by the tests, on every platform they run, and a compiled backend's
self-test compares them with the eager ones before training. Right shifts are arithmetic on
int32, so each is masked to the bits a logical shift would keep. Wrapping int32 replaced
exact int64 products, with the same bits and faster (benchmarks/RESULTS.md, Eager quantizers
without `where` and int64); the Triton kernels' native uint32 arithmetic gives the same bits
too.

Limit: indices are taken modulo 2^32, so tensors above 4G elements reuse bits.
"""
from __future__ import annotations

import torch

from .device import on_cuda

MASK32 = 0xFFFFFFFF
_C1 = 0x85EBCA6B
_C2 = 0xC2B2AE35
_GOLDEN = 0x9E3779B9


def fmix32_int(h: int) -> int:
    """MurmurHash3 finaliser on a Python int (host side)."""
    h &= MASK32
    h ^= h >> 16
    h = (h * _C1) & MASK32
    h ^= h >> 13
    h = (h * _C2) & MASK32
    h ^= h >> 16
    return h


def stream_key(seed: int, *ids: int) -> tuple[int, int]:
    """Mix a seed and stream ids (layer, step, gemm, operand, ...) into a 64-bit key (k0, k1).

    Each id is chained through the finaliser with a position-dependent offset, so that
    (1, 0) and (0, 1) give unrelated keys.
    """
    h0 = fmix32_int(seed ^ 0x5BD1E995)
    h1 = fmix32_int((seed >> 32) + _GOLDEN)
    for pos, v in enumerate(ids):
        v = int(v)
        h0 = fmix32_int(h0 ^ fmix32_int((v & MASK32) + pos * _GOLDEN))
        h1 = fmix32_int(h1 + fmix32_int(((v >> 32) & MASK32) ^ h0))
    return h0, h1


def as_int32(c: int) -> int:
    """A uint32 constant as the int32 with the same bits."""
    return c - (1 << 32) if c & 0x80000000 else c


def fmix32(h: torch.Tensor) -> torch.Tensor:
    """MurmurHash3 finaliser on an int32 tensor holding uint32 bits (returned likewise)."""
    h = h ^ ((h >> 16) & 0xFFFF)
    h = h * as_int32(_C1)                      # wraps: (h * C1) mod 2^32
    h = h ^ ((h >> 13) & 0x7FFFF)
    h = h * as_int32(_C2)
    return h ^ ((h >> 16) & 0xFFFF)


def random_bits(index: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """32 random bits per element.

    index: int32 or int64 tensor of element indices (any shape); key: int64 [2] = (k0, k1), uint32
    values. Returns an int32 tensor of index's shape holding the uint32 bits (mask after a
    right shift: ``(bits >> 24) & 0xFF`` is the top byte).
    """
    k = key.to(torch.int32)                          # uint32 values -> their int32 bits
    h = fmix32(index.to(torch.int32) ^ k[0])         # i mod 2^32
    return fmix32(h + k[1])                          # wraps: (h + k1) mod 2^32


def to_device(t: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A small host tensor (a key, a sign vector) on ``device`` without a host sync.

    A blocking copy from pageable host memory to a GPU waits for the GPU's stream to drain, so
    a runtime input made per call would stall the host at every quantized operand. On CUDA
    the copy goes through pinned memory, asynchronously; elsewhere it is a plain ``.to``.
    """
    device = torch.device(device)
    if on_cuda(device) and t.device.type == "cpu":
        if device.type != "cuda":  # cuda_path on the CPU: the same copy, nothing to pin
            return t.to(device, non_blocking=True, copy=True)
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def key_tensor(seed: int, ids: tuple[int, ...], device: torch.device | str) -> torch.Tensor:
    """The stream key as an int64 [2] tensor, a runtime input (no recompiles per step)."""
    return to_device(torch.tensor(stream_key(seed, *ids), dtype=torch.int64), device)
