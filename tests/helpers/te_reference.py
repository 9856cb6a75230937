"""Independent transcription of Transformer Engine's reference NVFP4 quantizer (RNE path).

Written from docs/numerics.md, NVFP4 (algorithm) and E2M1 (threshold
table) only, without looking at nvfp4_lab.formats, so the byte-equality tests compare two
independent readings of the same description. Finite inputs only (TE leaves NaN/Inf
undefined). Every step is IEEE FP32 arithmetic on torch tensors (never Python floats, which
are doubles), and the E4M3 cast is done by hand instead of through torch's float8 cast.

    codes, scales, amax = te_nvfp4_reference(x2d, order="te", tile=(1, 16))

order: "te" = TE >= 2.14, s = a_b * fp32(S_enc * fp32(1/6));
       "te_v2_8" = TE 2.8-2.13 reference, s = fp32(a_b / 6) * S_enc.
tile: (1, 16) 1D blocks along the last dim -> scales [M, K/16];
      (16, 16) 2D tiles -> scales [M/16, K/16] (one per tile, as TE replicates it per row).
"""
from __future__ import annotations

import torch

F32 = torch.float32
FLT_MAX = torch.tensor(torch.finfo(F32).max, dtype=F32)
INV6 = torch.tensor(1.0 / 6.0, dtype=F32)      # fp32(1/6) = 0.16666667163372
E4M3_MAX = torch.tensor(448.0, dtype=F32)
ORDERS = ("te", "te_v2_8")

# docs/numerics.md, E2M1: magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 are codes 0..7; bit 3 is the sign.
E2M1_MAGNITUDES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=F32)
THRESHOLDS = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=F32)
# A tie at a threshold goes to the even code. Below 0.25, 1.25, 2.5, 5 sits an even code
# (0, 2, 4, 6): the tie stays down. Above 0.75, 1.75, 3.5 sits an even code (2, 4, 6):
# the tie goes up.
TIES_UP = torch.tensor([0.75, 1.75, 3.5], dtype=F32)


def e2m1_magnitude_code(a: torch.Tensor) -> torch.Tensor:
    """|y| in [0, 6] (fp32) -> code 0..7 by the E2M1 table: the number of thresholds
    strictly below a, plus one when a is exactly a tie that rounds up."""
    a = a.to(F32).contiguous()
    below = torch.searchsorted(THRESHOLDS, a, right=False)     # #{t : t < a}
    up = (a.unsqueeze(-1) == TIES_UP).any(-1)
    return (below + up.long()).to(torch.uint8)


def e2m1_code(y: torch.Tensor) -> torch.Tensor:
    """Signed clamped y -> code; sign bit from y < 0 (so -0.0 -> 0, [-0.25, 0) -> 8)."""
    mag = e2m1_magnitude_code(y.abs())
    return mag | ((y < 0).to(torch.uint8) << 3)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes -> fp32 values (code 8 is -0.0)."""
    mag = E2M1_MAGNITUDES[(codes & 7).long()]
    return torch.where((codes & 8) != 0, -mag, mag)


def e4m3_round(s: torch.Tensor) -> torch.Tensor:
    """fp32 s in [0, 448] -> nearest E4M3 value (fp32), ties to even, subnormals kept.

    E4M3 has 3 mantissa bits and minimum normal exponent -6, so the spacing at s is
    2^(max(floor(log2 s), -6) - 3). s / spacing is exact; torch.round is half-to-even.
    """
    _, e = torch.frexp(s)                       # s = m * 2^e, m in [0.5, 1)
    quantum_exp = torch.clamp(e - 1, min=-6) - 3
    quantum = torch.ldexp(torch.ones_like(s), quantum_exp)
    return torch.round(s / quantum) * quantum


def e4m3_bytes(v: torch.Tensor) -> torch.Tensor:
    """E4M3-representable fp32 values in [0, 448] -> their bytes (bias 7)."""
    _, e = torch.frexp(v)
    exp = e - 1                                 # v = 1.f * 2^exp for normals
    normal = v >= 2.0 ** -6
    mant_n = torch.round((torch.ldexp(v, -exp) - 1.0) * 8).to(torch.int32)
    byte_n = ((exp + 7) << 3) | mant_n
    byte_s = torch.round(torch.ldexp(v, torch.full_like(exp, 9))).to(torch.int32)
    return torch.where(normal, byte_n, byte_s).to(torch.uint8)


def global_scales(amax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """NVFP4 steps 2-3: S_enc = min(2688 / A, FLT_MAX) (0 -> 1), S_dec = fp32(1 / S_enc)."""
    s_enc = torch.minimum(torch.tensor(2688.0, dtype=F32) / amax, FLT_MAX)
    s_enc = torch.where(s_enc == 0, torch.ones_like(s_enc), s_enc)
    return s_enc, torch.tensor(1.0, dtype=F32) / s_enc


def block_scale(block_amax: torch.Tensor, s_enc: torch.Tensor, order: str) -> torch.Tensor:
    """NVFP4 step 5: the block decode scale as an E4M3-representable fp32 value."""
    if order == "te":
        s = block_amax * (s_enc * INV6)
    elif order == "te_v2_8":
        s = (block_amax / torch.tensor(6.0, dtype=F32)) * s_enc
    else:
        raise ValueError(order)
    s = torch.minimum(s, FLT_MAX)
    s = torch.clamp(s, -E4M3_MAX, E4M3_MAX)
    return e4m3_round(s)


def te_nvfp4_reference(x: torch.Tensor, order: str = "te", tile: tuple[int, ...] = (1, 16),
                       rows: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """2-D x (fp32/bf16/fp16), finite, K % 16 == 0 (and M % 16 == 0 for 16x16 tiles).

    rows: TE's row-scaled variant, "A is a per-row vector; everything else per row"
    (1x16 blocks only).
    Returns (codes uint8 [M, K] unpacked, scales float8_e4m3fn, amax fp32 0-d or [M, 1]).
    """
    assert x.dim() == 2 and x.shape[1] % 16 == 0, x.shape
    tile = tuple(tile)
    assert tile in ((1, 16), (16, 16)), tile
    M, K = x.shape
    x32 = x.to(F32)
    if rows:
        assert tile == (1, 16)
        amax = x32.abs().amax(-1, keepdim=True)                     # [M, 1]
    else:
        amax = x32.abs().amax() if x32.numel() else torch.tensor(0.0, dtype=F32)
    s_enc, s_dec = global_scales(amax)

    if tile == (1, 16):
        blocks = x32.reshape(M, K // 16, 16)                        # [M, nb, 16]
    else:
        assert M % 16 == 0, x.shape
        blocks = x32.reshape(M // 16, 16, K // 16, 16).transpose(1, 2)
        blocks = blocks.reshape(M // 16, K // 16, 256)              # [Mt, Kt, 256]
    a_b = blocks.abs().amax(-1)
    s_b = block_scale(a_b, s_enc, order)                            # fp32(s_b)
    enc_b = torch.minimum(torch.tensor(1.0, dtype=F32) / (s_b * s_dec), FLT_MAX)
    y = torch.clamp(blocks * enc_b.unsqueeze(-1), -6.0, 6.0)
    codes = e2m1_code(y)

    if tile == (1, 16):
        codes = codes.reshape(M, K)
    else:
        codes = codes.reshape(M // 16, K // 16, 16, 16).transpose(1, 2).reshape(M, K)
    scales = e4m3_bytes(s_b).view(torch.float8_e4m3fn)
    return codes, scales, amax


def pad2d(x: torch.Tensor, rows: int = 1, cols: int = 16) -> torch.Tensor:
    """Zero-pad the last two dims of x up to multiples of (rows, cols)."""
    r, c = x.shape[-2], x.shape[-1]
    pr, pc = (-r) % rows, (-c) % cols
    return torch.nn.functional.pad(x, (0, pc, 0, pr))


# ------------------------------------------------------------------- decode and GEMM
# Written from TE's dequantize kernel (common/cast/nvfp4/dequantize_nvfp4.cuh: one
# ``final_scale = float(s_b) * amax * factor_inv`` per block, factor_inv = float(1 / 2688),
# then ``e2m1 * final_scale``) and TE's reference ``qgemm`` (custom_recipes/
# quantization_nvfp4.py: per 16-wide K block, the FP32 partial products scaled by the outer
# product of the two blocks' scales, accumulated in FP32, then times
# alpha = (A_x * A_w) / (6 * 6 * 448 * 448)).
FACTOR_INV = torch.tensor(1.0 / 2688.0, dtype=F32)


def te_dequantize(codes: torch.Tensor, scales: torch.Tensor, amax: torch.Tensor) -> torch.Tensor:
    """codes uint8 [M, K], scales e4m3 [M, K/16], amax fp32 0-d -> fp32 [M, K]."""
    final_scale = (scales.float() * amax) * FACTOR_INV              # [M, K/16], two roundings
    return e2m1_decode(codes) * final_scale.repeat_interleave(16, dim=-1)


def te_qgemm(cx: torch.Tensor, sx: torch.Tensor, ax: torch.Tensor,
             cw: torch.Tensor, sw: torch.Tensor, aw: torch.Tensor,
             limits: tuple[int, int] = (448, 448)) -> torch.Tensor:
    """Y = X W^T from codes [M, K] / [N, K], scales [M, K/16] / [N, K/16], amaxes: fp32 [M, N].
    limits: each operand's global E4M3 limit (448; 256 for a 4/6 tensor)."""
    vx, vw = e2m1_decode(cx), e2m1_decode(cw)
    y = torch.zeros(cx.shape[0], cw.shape[0], dtype=F32)
    for k in range(cx.shape[1] // 16):
        blk = slice(16 * k, 16 * k + 16)
        partial = vx[:, blk] @ vw[:, blk].T
        y = y + torch.outer(sx[:, k].float(), sw[:, k].float()) * partial
    alpha = (ax * aw) / torch.tensor(6.0 * 6.0 * limits[0] * limits[1], dtype=F32)
    return alpha * y
