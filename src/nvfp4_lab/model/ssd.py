"""Mamba-2's selective state-space scan (SSD), chunked, with its recurrence as the reference.

The scan is what a Mamba-2 block computes between its two linear layers, and the paper keeps it
in high precision (paper Sec. 4.1: only linear layers are quantized), so here it is plain fp32
PyTorch. Per head h with state S_t [P, N], decay a_t = dt_t * A_h (A_h < 0, dt_t > 0):

    S_t = exp(a_t) * S_{t-1} + dt_t * x_t B_t^T          x_t [P], B_t, C_t [N]
    y_t = S_t C_t

``ssd_recurrent`` is that loop over tokens, the reference. ``ssd_chunked`` computes the same
thing in the block form of the Mamba-2 paper ("state space duality"): the sequence is cut into
chunks of Q tokens, and

  1. within a chunk, y is a masked attention-like product: y_i = sum_{j<=i} (C_i . B_j)
     exp(a_{j+1} + ... + a_i) dt_j x_j, a [Q, Q] matrix per chunk and head;
  2. each chunk's own contribution to the state at its end: sum_j exp(a_{j+1..Q}) dt_j x_j B_j^T;
  3. the states entering each chunk: a [c+1, c+1] lower-triangular decay matrix over chunk
     totals applied to those contributions (c = T / Q chunks, a few at lab scale);
  4. the entering state's contribution to every position of the chunk: exp(a_1..i) S C_i.

Everything is batched over chunks, heads and the batch: no Python loop over tokens or chunks.
B and C are shared by the heads of a group (``heads = groups * per_group``, group outer, as
mamba_ssm orders them); the group axis is kept apart so that C.B is computed once per group.
The sequence is padded with zeros up to a multiple of Q; a padded token has dt = 0, so it
neither decays nor feeds the state, and being last it never reaches a real output.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def segment_sums(a: torch.Tensor) -> torch.Tensor:
    """a: [..., L] -> [..., L, L] with out[i, j] = a[j+1] + ... + a[i] for i >= j, -inf above
    the diagonal (so that exp() of it is the causal decay matrix).

    Summed directly from the masked terms rather than as a difference of two cumulative sums,
    which would cancel when the sums are large and the segment short: used across chunks,
    where the sums run over the whole sequence and L (chunks + 1) is small.
    """
    L = a.shape[-1]
    terms = a[..., None, :].expand(*a.shape, L).transpose(-1, -2)  # terms[i, j] = a[i]
    strict = torch.ones(L, L, dtype=torch.bool, device=a.device).tril(-1)  # i > j
    sums = terms.masked_fill(~strict, 0).cumsum(dim=-2)  # sum of a[k] for j < k <= i
    causal = torch.ones(L, L, dtype=torch.bool, device=a.device).tril()
    return sums.masked_fill(~causal, float("-inf"))


def ssd_chunked(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                C: torch.Tensor, chunk: int) -> torch.Tensor:
    """The scan in chunked form, computed in float32 (autocast or not).

    x: [b, T, H, P]; dt: [b, T, H] (> 0); A: [H] (< 0); B, C: [b, T, G, N] with G dividing H.
    Returns y: [b, T, H, P] in x's dtype.
    """
    with torch.autocast(x.device.type, enabled=False):  # fp32 under bf16 autocast too
        return _ssd_chunked(x, dt, A, B, C, chunk).to(x.dtype)


def _ssd_chunked(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                 C: torch.Tensor, chunk: int) -> torch.Tensor:
    b, T, H, P = x.shape
    G, N = B.shape[-2:]
    R = H // G  # heads per group
    pad = -T % chunk
    x, dt, B, C = (F.pad(t.float(), (0, 0) * (t.dim() - 2) + (0, pad)) for t in (x, dt, B, C))
    c = (T + pad) // chunk
    xdt = (x * dt[..., None]).view(b, c, chunk, G, R, P)  # dt_j x_j, heads split into groups
    B = B.view(b, c, chunk, G, N)
    C = C.view(b, c, chunk, G, N)
    a = (dt * A.float()).view(b, c, chunk, G, R).permute(0, 3, 4, 1, 2)  # [b, G, R, c, Q]
    a_cum = a.cumsum(dim=-1)  # decay from the chunk's start through position i

    # 1. within each chunk: (C_i . B_j) * exp(a_{j+1..i}) * dt_j x_j; the exponent as a
    # difference of chunk-local cumulative sums (error <= Q u max|a|; segment_sums would be
    # exact to rounding but costs a masked cumsum over [Q, Q] forward and backward, a third
    # of the scan's time at hybrid_nano)
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=x.device).tril()
    decay = (a_cum[..., :, None] - a_cum[..., None, :]).masked_fill(~causal, float("-inf")).exp()
    scores = torch.einsum("bcign,bcjgn->bgcij", C, B)  # [b, G, c, Q, Q], one per group
    y = torch.einsum("bgrcij,bcjgrp->bcigrp", scores[:, :, None] * decay, xdt)

    # 2. each chunk's inputs carried to its end: sum_j exp(a_{j+1..Q}) dt_j x_j B_j^T
    to_end = (a_cum[..., -1:] - a_cum).exp()  # [b, G, R, c, Q]
    states = torch.einsum("bcjgn,bgrcj,bcjgrp->bcgrpn", B, to_end, xdt)  # [b, c, G, R, P, N]

    # 3. the state entering chunk k: the earlier chunks' states decayed across the chunks between
    totals = F.pad(a_cum[..., -1], (1, 0))  # [b, G, R, c + 1]; index 0 is the zero start
    across = segment_sums(totals).exp()  # [b, G, R, c + 1, c + 1]
    states = F.pad(states, (0, 0) * 4 + (1, 0))  # [b, c + 1, G, R, P, N], zero initial state
    entering = torch.einsum("bgrkm,bmgrpn->bkgrpn", across, states)[:, :c]

    # 4. the entering state read out at every position, decayed from the chunk's start
    y = y + torch.einsum("bcign,bcgrpn,bgrci->bcigrp", C, entering, a_cum.exp())
    return y.reshape(b, c * chunk, H, P)[:, :T]


def ssd_recurrent(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                  C: torch.Tensor) -> torch.Tensor:
    """The reference: the recurrence one token at a time, in float64.

    Shapes as ``ssd_chunked``; returns y: [b, T, H, P] float64.
    """
    b, T, H, P = x.shape
    R = H // B.shape[-2]
    x, dt, A = x.double(), dt.double(), A.double()
    B = B.double().repeat_interleave(R, dim=-2)  # [b, T, H, N]: head h reads group h // R
    C = C.double().repeat_interleave(R, dim=-2)
    S = x.new_zeros(b, H, P, B.shape[-1])
    ys = []
    for t in range(T):
        S = (dt[:, t] * A).exp()[..., None, None] * S \
            + (dt[:, t, :, None] * x[:, t])[..., None] * B[:, t, :, None, :]
        ys.append(torch.einsum("bhpn,bhn->bhp", S, C[:, t]))
    return torch.stack(ys, dim=1)
