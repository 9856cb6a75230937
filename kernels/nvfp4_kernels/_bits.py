"""Triton device helpers: tiles, scales, E2M1 rounding and codes, fp8 bytes, random bits.

Used by ``fp4.py`` (all of them), ``fp8.py`` (``fp8_bits``), ``rht.py`` and ``epilogue.py``
(``round_bf16``). Each helper is the
transcription of one function of ``nvfp4_lab.formats`` with the same fp32 operations in the
same order (the reference is named in each docstring), or an integer form of it that gives the
same bits. Conventions for tiles: a program holds a ``[G, BR, NT, BC]`` tile of x viewed as
``[P, R, C]``; a block is the ``BR x BC`` slice ``[g, :, t, :]``, so block quantities are
``[G, 1, NT, 1]`` and broadcast onto the tile.

Products that feed an addition (where a fused multiply-add would skip a rounding) are all
exact: multiplications by powers of two of values that neither overflow nor underflow, or of
an integer by a power of two. An FMA therefore gives the same result as the separate
operations, whatever the compiler does (``fp4.py`` also launches with fusion disabled).
"""
from __future__ import annotations

import triton
import triton.language as tl

FLT_MAX = tl.constexpr(3.4028234663852886e38)
INV6 = tl.constexpr(0.1666666716337204)  # fp32(1/6), exactly representable
_E4M3_MIN_NORMAL = tl.constexpr(0.015625)  # 2^-6
_TWO23 = tl.constexpr(8388608.0)  # 2^23: adding it rounds [0, 2^22] to an integer, RNE


@triton.jit
def tile_coords(R, C, BR: tl.constexpr, BC: tl.constexpr, G: tl.constexpr,
                NT: tl.constexpr):
    """This program's tile of x viewed as [P, R, C]: its blocks and elements.

    Programs enumerate (p, row tile, column tile), column tiles fastest. Returns int64
    (p: scalar; i: [G, 1, 1, 1] block rows, j: [1, 1, NT, 1] block columns; r: [G, BR, 1, 1]
    and c: [1, 1, NT, BC], the element rows and columns); the last tiles reach past R and C.
    """
    pid = tl.program_id(0).to(tl.int64)
    n_ct = tl.cdiv(C, NT * BC)
    n_rt = tl.cdiv(R, G * BR)
    ct = pid % n_ct
    rt = (pid // n_ct) % n_rt
    p = pid // (n_ct * n_rt)
    i = (rt * G + tl.arange(0, G))[:, None, None, None]
    j = (ct * NT + tl.arange(0, NT))[None, None, :, None]
    r = i * BR + tl.arange(0, BR)[None, :, None, None]
    c = j * BC + tl.arange(0, BC)[None, None, None, :]
    return p, i, j, r, c


@triton.jit
def tile_offsets(R, C, BR: tl.constexpr, BC: tl.constexpr, G: tl.constexpr,
                 NT: tl.constexpr):
    """This program's tile in x (contiguous, viewed as [P, R, C]).

    Returns (offs: int64 [G, BR, NT, BC], the row-major index of each element in x, which is
    also its SR counter; mask: [G, BR, NT, BC], False outside x).
    """
    p, _, _, r, c = tile_coords(R, C, BR, BC, G, NT)
    return p * R * C + r * C + c, (r < R) & (c < C)


@triton.jit
def block_amax_bits(x):
    """x: fp32 [G, BR, NT, BC] -> bit patterns of the block amaxes, int32 [G, 1, NT, 1].

    Non-negative floats order like their bit patterns, so the max is taken on integers: exact
    for subnormals, and a block holding NaN or Inf has amax bits >= 0x7F800000 (no reliance
    on how a float max treats NaN). Padding loads as 0 and never raises an amax.
    """
    mag = x.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    return tl.max(tl.max(mag, axis=3, keep_dims=True), axis=1, keep_dims=True)


@triton.jit
def e4m3_rne(s):
    """fp32 s in [0, 448] -> the nearest E4M3 value as fp32, ties to even (``scales.to_e4m3``).

    Normal range (s >= 2^-6): round the 23-bit mantissa to 3 bits on the raw bits (add
    0x7FFFF plus the lowest kept bit, clear the 20 low bits; a carry bumps the exponent).
    Subnormal range: multiples of 2^-9, so round s * 2^9 (exact) to an integer by adding and
    subtracting 2^23 (fp32 addition is RNE), then scale back (exact). The result never exceeds
    448, which is an E4M3 value.
    """
    u = s.to(tl.int32, bitcast=True)
    normal = (((u + 0x7FFFF + ((u >> 20) & 1)) >> 20) << 20).to(tl.float32, bitcast=True)
    sub = ((s * 512.0 + _TWO23) - _TWO23) * 0.001953125
    return tl.where(s < _E4M3_MIN_NORMAL, sub, normal)


@triton.jit
def round_bf16(v):
    """fp32 -> the nearest bf16, ties to even, as fp32 (subnormals kept, overflow to Inf);
    a NaN becomes torch's 0x7FC0 (``c10::BFloat16``'s cast on the CPU)."""
    u = v.to(tl.uint32, bitcast=True)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    r = tl.where(v != v, 0x7FC00000, r)
    return r.to(tl.float32, bitcast=True)


@triton.jit
def fp8_bits(v, MBITS: tl.constexpr, EMIN: tl.constexpr):
    """fp32 v >= 0 on the grid of an FP8 format (MBITS mantissa bits, smallest normal 2^EMIN,
    bias 1 - EMIN: E4M3 3, -6; E5M2 2, -14) -> its unsigned byte as int32 (what torch's cast
    to ``float8_e4m3fn`` / ``float8_e5m2`` stores for v).

    Normal: rebias the exponent field and keep the top MBITS mantissa bits (exact, v is on
    the grid). Subnormal: the byte is v in units of 2^(EMIN - MBITS); the scaling is exact.
    """
    u = v.to(tl.int32, bitcast=True)
    normal = (u >> (23 - MBITS)) - ((126 + EMIN) << MBITS)  # fp32 bias 127 -> 1 - EMIN
    sub = (v * (1 << (MBITS - EMIN))).to(tl.int32)
    return tl.where(u < ((127 + EMIN) << 23), sub, normal)


@triton.jit
def nvfp4_scales(a_b, amax):
    """NVFP4 scales, TE order (``nvfp4.block_scales(order="te")``).

    a_b: fp32 block amaxes [G, 1, NT, 1]; amax: fp32 0-d tensor amax A (finite, >= 0).
    Returns (dec: fp32(s_b), the E4M3 block decode scale; enc: fp32 block encode scale).
    """
    s_enc = tl.minimum(tl.div_rn(2688.0, amax), FLT_MAX)
    s_dec = tl.div_rn(1.0, s_enc)  # the reference's 1.0 / s_enc is a correctly rounded reciprocal
    s = tl.minimum(a_b * (s_enc * INV6), FLT_MAX)
    dec = e4m3_rne(tl.minimum(s, 448.0))
    enc = tl.minimum(tl.div_rn(1.0, dec * s_dec), FLT_MAX)  # zero scale: 1/0 = inf -> FLT_MAX
    return dec, enc


@triton.jit
def e8m0_scales(a_bits, MODE: tl.constexpr):
    """MXFP4 scales (``scales.e8m0_exponent`` and ``exp2_int``).

    a_bits: int32 bit patterns of finite block amaxes [G, 1, NT, 1]; MODE: "ceil" | "floor" |
    "even". Returns (dec: fp32 2^k, enc: fp32 2^-k), k clamped to [-127, 127], both built from
    bits (2^-127 is the subnormal 0x00400000).
    """
    if MODE == "ceil":
        t = tl.div_rn(a_bits.to(tl.float32, bitcast=True), 6.0).to(tl.int32, bitcast=True)
        e = (t >> 23) & 0xFF
        k = e - 127 + ((t & 0x7FFFFF) != 0).to(tl.int32)
        # fp32 subnormal t: -126 if t > 2^-127 (compared on the bits), else -127
        k = tl.where(e == 0, tl.where(t > 0x00400000, -126, -127), k)
    elif MODE == "floor":
        k = ((a_bits >> 23) & 0xFF) - 129
    else:
        # "even": round the mantissa to one bit, half to even, on the bit pattern
        k = (((a_bits + (1 << 21)) >> 23) & 0xFF) - 129
    k = tl.minimum(tl.maximum(k, -127), 127)
    dec = tl.where(k == -127, 0x00400000, (k + 127) << 23).to(tl.float32, bitcast=True)
    enc = tl.where(k == 127, 0x00400000, (127 - k) << 23).to(tl.float32, bitcast=True)
    return dec, enc


@triton.jit
def _step(a):
    """E2M1 grid spacing at magnitude a and its reciprocal: (0.5, 2) below 2, (1, 1) in
    [2, 4), (2, 0.5) from 4 on. Multiplying by the reciprocal of a power of two is the
    correctly rounded division, so ``v * inv`` is the reference's ``v / step`` bit for bit
    (and much cheaper than ``div_rn``)."""
    step = tl.where(a < 2.0, 0.5, tl.where(a < 4.0, 1.0, 2.0))
    inv = tl.where(a < 2.0, 2.0, tl.where(a < 4.0, 1.0, 0.5))
    return step, inv


@triton.jit
def e2m1_rne(a):
    """Magnitudes a in [0, 6] -> E2M1 grid, ties to even (``e2m1.round_rne``).

    round(a * (1 / step)) * step: the scaling is exact, and the integer rounding of a value
    in [0, 4] is the addition and subtraction of 2^23.
    """
    step, inv = _step(a)
    return ((a * inv + _TWO23) - _TWO23) * step


@triton.jit
def e2m1_sr(a, bits, EXACT: tl.constexpr):
    """Stochastic rounding of magnitudes a in [0, 6] (``e2m1.round_sr_hw8`` / ``_exact``).

    bits: uint32 random words. hw8: up iff floor(256 f) + r8 >= 256 with r8 the top byte;
    exact: up iff r24 < f * 2^24 with r24 the top 24 bits; f = (a - lo) / step, exact. The
    arguments of floor are >= 0, so the GPU's flush-to-zero floor (libdevice) is exact too.
    """
    step, inv = _step(a)
    lo = tl.floor(a * inv) * step
    f = (a - lo) * inv
    if EXACT:
        up = (bits >> 8).to(tl.float32) < f * 16777216.0
    else:
        up = tl.floor(f * 256.0) + (bits >> 24).to(tl.float32) >= 256.0
    return tl.where(up, lo + step, lo)


@triton.jit
def e2m1_code(mag):
    """E2M1 magnitudes (fp32, on the grid) -> codes 0..7, int32 (``e2m1.to_codes``): 2 m
    below 2, m + 2 in [2, 4), m / 2 + 4 from 4 on; every step is exact."""
    idx = tl.where(mag < 2.0, mag * 2.0, tl.where(mag < 4.0, mag + 2.0, mag * 0.5 + 4.0))
    return idx.to(tl.int32)


@triton.jit
def _fmix32(h):
    """MurmurHash3's finaliser on uint32 (``rng.fmix32``), wrap-around arithmetic."""
    h ^= h >> 16
    h *= 0x85EBCA6B
    h ^= h >> 13
    h *= 0xC2B2AE35
    h ^= h >> 16
    return h


@triton.jit
def random_bits(index, k0, k1):
    """fmix32(fmix32((i mod 2^32) ^ k0) + k1) (``rng.random_bits``).

    index: int64 element indices; k0, k1: int32 scalars holding the key's uint32 bits
    (``fp4.sr_key_args``). -> uint32.
    """
    k0 = k0.to(tl.uint32, bitcast=True)
    k1 = k1.to(tl.uint32, bitcast=True)
    return _fmix32(_fmix32(index.to(tl.uint32) ^ k0) + k1)
