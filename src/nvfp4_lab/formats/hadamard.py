"""Random Hadamard transforms (paper Sec. 4.2, App. C, App. E.4).

A Wgrad GEMM dW = dY^T X reduces over tokens. Transforming both operands along that dimension
with the same orthogonal R leaves the product unchanged, (dY^T R)(X^T R)^T = dY^T X (Eq. 6),
while spreading each outlier over d elements, which makes the block amax a better fit for
the rest of the block. The paper applies it to the Wgrad inputs only, at d = 16, with one
random sign vector shared by all layers for the whole run.

R = diag(s) . H_d / sqrt(d): H_d is the Sylvester Hadamard matrix in natural order,
H[i, j] = (-1)^popcount(i & j), and s is a +-1 vector that flips the rows of H_d. Each chunk v
of d consecutive elements along the axis becomes v . R = ((v * s) . H_d) / sqrt(d).

What we do differently from Transformer Engine, and why:
* The product with H_d is a fast Walsh-Hadamard butterfly (log2 d stages of pairwise
  sums and differences), not a matmul. The butterfly fixes the order of every FP32 addition, so
  eager, torch.compile and Triton agree bit for bit; a BLAS matmul leaves the order to the library.
  TE computes x . R in BF16 with FP32 accumulation; both round once to BF16, and they agree exactly
  whenever a chunk spans fewer than ~16 binades (its partial sums are then exact in FP32), which
  covers all but adversarial data (docs/numerics.md, Random Hadamard transform).
* Any power-of-two size 2..256, not just 16. The 1/sqrt(d) factor is exact for d a power of
  four (16, 64, 256: TE's 0.25 for d = 16); for the other sizes it is fp32(1/sqrt(d)), one
  extra rounding.
* The sign vector follows a policy instead of a constant: ``none`` (all +1), ``fixed`` (one
  vector for the run: TE's vector at d = 16, otherwise drawn from the seed), ``per_layer``,
  ``per_step``, ``per_call`` (fresh per layer / per optimizer step / per transform), all drawn
  from the counter-based hash of ``rng.py`` so any of them can be reproduced from the seed.
  The peers, in these terms: the paper and TE use ``fixed``; torchao draws one vector per
  layer (``per_layer``); Quartet II (IST-DASLab) and Tseng et al. draw a new vector at every
  backward call (``per_call``; ``per_step`` is one vector per step shared by the layers).

The result is rounded to the input dtype (BF16 in, BF16 out, as TE materialises it), and the
quantizer then takes its amax in the rotated space (App. C: "s is the scale factor computed
in the rotated space").
"""
from __future__ import annotations

import math

import torch

from .rng import fmix32_int, stream_key
from .spec import SIGN_POLICIES, check_size

# TE's hard-coded Wgrad sign vector for d = 16 (bit i set where s_i = -1): 0xD7E8
TE_SIGN_MASK_16 = 0xD7E8


def check_divides(size: int, n: int, axis: int) -> None:
    """The transform of a zero-padded chunk cannot be cut back, so the axis must divide."""
    if n % size:
        raise ValueError(
            f"RHT size {size} needs dim {axis} (length {n}) to be a multiple of {size}; "
            f"pad that dimension or choose a size that divides it")


def hadamard_matrix(d: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The normalised Sylvester Hadamard matrix H_d / sqrt(d): [d, d], symmetric, orthogonal."""
    check_size(d)
    i = torch.arange(d)
    parity = torch.zeros(d, d, dtype=torch.int64)
    for bit in range(d.bit_length()):
        parity ^= ((i[:, None] & i[None, :]) >> bit) & 1
    return ((1 - 2 * parity).to(torch.float64) / math.sqrt(d)).to(dtype)


# how many of (layer, step, call) each policy draws its vector from
_POLICY_IDS = {"none": 0, "fixed": 0, "per_layer": 1, "per_step": 2, "per_call": 3}


def policy_ids(policy: str, layer: int, step: int, call: int) -> tuple[int, ...]:
    """The ids ``policy`` draws its sign vector from, in order: equal ids, equal vectors."""
    if policy not in SIGN_POLICIES:
        raise ValueError(f"RHT sign policy must be one of {SIGN_POLICIES}, got {policy!r}")
    return (layer, step, call)[:_POLICY_IDS[policy]]


def sign_vector(d: int, policy: str = "fixed", seed: int = 0, layer: int = 0, step: int = 0,
                call: int = 0) -> torch.Tensor:
    """The +-1 sign vector s (fp32 [d]) for a policy; ids that the policy ignores are ignored."""
    check_size(d)
    ids = policy_ids(policy, layer, step, call)
    if policy == "none":
        return torch.ones(d)
    if policy == "fixed" and d == 16:
        mask = TE_SIGN_MASK_16
    else:
        k0, k1 = stream_key(seed, 0x52485400, *ids)  # 0x52485400 = "RHT": its own stream
        mask = 0
        for w in range(0, d, 32):  # 32 signs per hash word
            mask |= fmix32_int(k0 ^ fmix32_int(k1 + w)) << w
    bits = torch.tensor([(mask >> i) & 1 for i in range(d)], dtype=torch.float32)
    return 1.0 - 2.0 * bits


def fwht(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Unnormalised Walsh-Hadamard transform along ``dim`` (a power of two), in x's dtype.

    x: [..., d, ...] -> x . H_d along dim, by butterflies: at each stage h, the pair
    (a, b) = (x[j], x[j+h]) for j with bit h clear becomes (a + b, a - b). Each stage splits
    the axis into [d / 2h, 2, h], takes the halves a and b, and stacks a + b and a - b back.
    That is two vectorised ops and a copy per stage; selecting between x + x[j ^ h] and
    x[j ^ h] - x with torch.where (the form this replaced, same bits) cost 9x more eager on
    the CPU and 4.7x more under torch.compile (benchmarks/RESULTS.md).
    """
    dim = dim % x.dim()
    d = x.shape[dim]
    h = 1
    while h < d:
        a, b = x.unflatten(dim, (d // (2 * h), 2, h)).unbind(dim + 1)  # [..., d/2h, h, ...]
        x = torch.stack((a + b, a - b), dim + 1).flatten(dim, dim + 2)
        h *= 2
    return x


def rht_dim(x: torch.Tensor, signs: torch.Tensor, dim: int = -1,
            inverse: bool = False) -> torch.Tensor:
    """Random Hadamard transform along ``dim`` in chunks of d = len(signs).

    x: [..., L, ...] with L % d == 0. Computes in fp32, rounds once to x's dtype.
    Forward: v -> (v * s) H / sqrt(d). Inverse (R^T): w -> (w H / sqrt(d)) * s.
    Transforming in place (no transpose) keeps the innermost dim contiguous when dim is not
    last, so the compiled kernel vectorises.
    """
    dim = dim % x.dim()
    d = signs.numel()
    v = x.float().unflatten(dim, (-1, d))  # [..., L/d, d, ...]
    norm = 2.0 ** (-(d.bit_length() - 1) / 2)  # 1/sqrt(d): exact when log2(d) is even
    norm = float(torch.tensor(norm, dtype=torch.float32))
    s = signs.to(device=x.device, dtype=torch.float32).view(d, *([1] * (x.dim() - dim - 1)))
    if inverse:
        v = fwht(v, dim + 1) * norm * s
    else:
        v = fwht(v * s, dim + 1) * norm
    return v.flatten(dim, dim + 1).to(x.dtype)


def rht(x: torch.Tensor, size: int = 16, axis: int = -1, signs: torch.Tensor | str = "fixed",
        seed: int = 0, inverse: bool = False) -> torch.Tensor:
    """Random Hadamard transform of x along ``axis`` in chunks of ``size``.

    signs: a +-1 tensor [size], or a policy name resolved with ``sign_vector(size, policy,
    seed)`` (ids 0). The axis length must be a multiple of size: the transform of a
    zero-padded chunk cannot be cut back to the original length.
    """
    check_size(size)
    if isinstance(signs, str):
        signs = sign_vector(size, signs, seed)
    if signs.numel() != size:
        raise ValueError(f"sign vector has {signs.numel()} entries, RHT size is {size}")
    check_divides(size, x.shape[axis], axis)
    return rht_dim(x, signs, axis, inverse)
