"""Independent transcription of 4/6 block-scale selection (TE's ``nvfp4_4over6`` reference).

Written from docs/numerics.md, "4/6 block-scale selection", with the E2M1 table and the
hand-made E4M3 rounding of te_reference.py, without looking at nvfp4_lab.formats. Every step
is an FP32 torch operation; sums run in the documented order, one explicit addition at a time.

    codes, scales, amax = four_over_six_reference(x2d, error="mae", limit=256, tile=(1, 16))
"""
from __future__ import annotations

import torch

from helpers.te_reference import F32, FLT_MAX, e2m1_code, e2m1_decode, e4m3_bytes, e4m3_round

E4M3_MAX = torch.tensor(448.0, dtype=F32)


def _candidate(blocks: torch.Tensor, s: torch.Tensor, s_dec: torch.Tensor) -> torch.Tensor:
    """Step 4 for one candidate scale s (fp32 E4M3 values, one per block): codes."""
    enc = torch.minimum(torch.tensor(1.0, dtype=F32) / (s * s_dec), FLT_MAX)
    return e2m1_code(torch.clamp(blocks * enc.unsqueeze(-1), -6.0, 6.0))


def _row_errors(rows: torch.Tensor, codes: torch.Tensor, s: torch.Tensor, amax: torch.Tensor,
                limit: int, error: str) -> torch.Tensor:
    """Steps 5-6 along the last dim: rows [..., 16], s [...] -> error per row, element order."""
    denom = torch.tensor(6.0 * limit, dtype=F32)
    total: torch.Tensor | None = None
    for i in range(rows.shape[-1]):
        d = ((e2m1_decode(codes[..., i]) * s) * amax) / denom - rows[..., i]
        e = d.abs() if error == "mae" else d * d
        total = e if total is None else total + e
    assert total is not None
    return total


def four_over_six_reference(x: torch.Tensor, error: str = "mae", limit: int = 256,
                            tile: tuple[int, ...] = (1, 16),
                            rows: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """2-D finite x, K % 16 == 0 (M % 16 == 0 for tiles). Returns (codes uint8 [M, K],
    scales float8_e4m3fn [M, K/16] or [M/16, K/16], amax fp32 0-d, or [M, 1] with ``rows``:
    row-scaled, one amax per row in the scales and in the error)."""
    M, K = x.shape
    x32 = x.to(F32)
    amax = x32.abs().amax(-1, keepdim=True) if rows else x32.abs().amax()
    s_enc = torch.minimum(torch.tensor(6.0 * limit, dtype=F32) / amax, FLT_MAX)
    s_dec = torch.tensor(1.0, dtype=F32) / s_enc
    if tuple(tile) == (1, 16):
        blocks = x32.reshape(M, K // 16, 16)                         # [M, nb, 16]
        a_b = blocks.abs().amax(-1)
    else:
        blocks = x32.reshape(M // 16, 16, K // 16, 16).permute(0, 2, 1, 3)  # [Mt, Kt, 16r, 16c]
        a_b = blocks.abs().amax((-1, -2))
    base = (a_b / torch.tensor(6.0, dtype=F32)) * s_enc
    s6 = e4m3_round(torch.minimum(base, E4M3_MAX))
    s4 = e4m3_round(torch.minimum(base * torch.tensor(1.5, dtype=F32), E4M3_MAX))
    flat = blocks if tuple(tile) == (1, 16) else blocks.reshape(M // 16, K // 16, 256)
    c6, c4 = _candidate(flat, s6, s_dec), _candidate(flat, s4, s_dec)
    if tuple(tile) == (1, 16):
        e6 = _row_errors(blocks, c6, s6, amax, limit, error)
        e4 = _row_errors(blocks, c4, s4, amax, limit, error)
    else:
        shape = blocks.shape
        r6 = _row_errors(blocks, c6.reshape(shape), s6.unsqueeze(-1), amax, limit, error)
        r4 = _row_errors(blocks, c4.reshape(shape), s4.unsqueeze(-1), amax, limit, error)
        e6, e4 = _pairwise(r6), _pairwise(r4)                          # [Mt, Kt]
    pick4 = e4 < e6
    codes = torch.where(pick4.unsqueeze(-1), c4, c6)
    scales = torch.where(pick4, s4, s6)
    if tuple(tile) == (1, 16):
        codes = codes.reshape(M, K)
    else:
        codes = codes.reshape(M // 16, K // 16, 16, 16).permute(0, 2, 1, 3).reshape(M, K)
    return codes, e4m3_bytes(scales).view(torch.float8_e4m3fn), amax


def _pairwise(r: torch.Tensor) -> torch.Tensor:
    """Row errors [..., 16] -> r[0:8] + r[8:16], then halves again, down to one value."""
    while r.shape[-1] > 1:
        h = r.shape[-1] // 2
        r = r[..., :h] + r[..., h:]
    return r[..., 0]


def decode(codes: torch.Tensor, scales: torch.Tensor, amax: torch.Tensor, limit: int,
           tile: tuple[int, ...] = (1, 16)) -> torch.Tensor:
    """Step 8: q * ((fp32(s) * A) * fp32(1 / 6L)), one scale per block or tile."""
    s = scales.float()
    if tuple(tile) == (16, 16):
        s = s.repeat_interleave(16, dim=0)
    final = (s * amax) * torch.tensor(1.0 / (6.0 * limit), dtype=F32)
    return e2m1_decode(codes) * final.repeat_interleave(16, dim=-1)
