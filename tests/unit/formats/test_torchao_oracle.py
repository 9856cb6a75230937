"""Differential tests against torchao 0.18 on CPU (docs/numerics.md, Other references).

* MXFP4 ``ceil`` / ``floor`` / ``even`` == ``to_mx(..., RCEIL / FLOOR / EVEN)`` byte for byte
  (E8M0 scale bytes and packed E2M1 nibbles), on bf16 and fp32 data.
* torchao 0.18's eager RCEIL takes ``ceil(torch.log2(amax / 6))``, which is off by one for fp32
  descales a few ulps above a power of two: there we match the exact bit-field rule instead,
  and torchao does not.
* NVFP4 ``order="torchao"`` == ``nvfp4_quantize(x, 16, per_tensor_amax_to_scale(A))`` byte for
  byte, including -0.0 and the 2^-6 floor on block scales; the default ``order="te"`` differs
  from it on zero / underflowing blocks.
"""
from __future__ import annotations

import math
import struct

import pytest
import torch

pytest.importorskip("torchao")
from torchao.prototype.mx_formats.config import ScaleCalculationMode  # noqa: E402
from torchao.prototype.mx_formats.mx_tensor import to_mx  # noqa: E402
from torchao.prototype.mx_formats.nvfp4_tensor import (  # noqa: E402
    nvfp4_quantize,
    per_tensor_amax_to_scale,
)

from nvfp4_lab.formats import quantize  # noqa: E402

F32, BF16 = torch.float32, torch.bfloat16
MODES = {"ceil": ScaleCalculationMode.RCEIL, "floor": ScaleCalculationMode.FLOOR,
         "even": ScaleCalculationMode.EVEN}
TIES = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)  # E2M1 midpoints (at scale 1)


def u8(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def f32(v: float) -> float:
    """Round a Python float (double) to fp32, RNE."""
    return struct.unpack("<f", struct.pack("<f", v))[0]


def f32_from_bits(b: int) -> float:
    return struct.unpack("<f", struct.pack("<I", b))[0]


def f32_bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def exact_ceil_byte(amax: float) -> int:
    """Biased E8M0 byte of 2^ceil(log2(fp32(amax / 6))), clamped to [-127, 127], exactly.

    fp32(amax / 6) via a double division is correctly rounded (53 >= 2 * 24 + 2)."""
    t = f32(amax / 6.0)
    if t == 0.0:
        return 0
    m, e = math.frexp(t)  # t = m * 2^e, m in [0.5, 1)
    k = e - 1 if m == 0.5 else e
    return max(-127, min(127, k)) + 127


# ------------------------------------------------------------------------------ data
def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def data_normal(g):
    return torch.randn(32, 256, generator=g)


def data_heavy(g):
    return torch.randn(32, 256, generator=g) * torch.exp(2.0 * torch.randn(32, 256, generator=g))


def data_binades(g):
    """Elements spread over +-2^[-60, 60], so both block amaxes and in-block values span many
    binades (no block amax below 6 * 2^-127, where torchao RCEIL scales by 1 instead of 2^127)."""
    e = torch.randint(-60, 61, (32, 256), generator=g).float()
    sign = torch.where(torch.rand(32, 256, generator=g) < 0.5, -1.0, 1.0)
    return sign * (1.0 + torch.rand(32, 256, generator=g)) * torch.exp2(e)


def data_ties(g, block=32):
    """Every element an exact E2M1 midpoint (or grid point) after scaling: per block one
    element +-6 * 2^k (all three E8M0 rules give k), the rest midpoints * 2^k."""
    rows, nb = 16, 8
    pool = torch.tensor(TIES + (0.0, 0.5, 1.0, 3.0, 4.0, 6.0))
    v = pool[torch.randint(0, len(pool), (rows, nb, block), generator=g)]
    v[..., 0] = 6.0
    v = v * torch.where(torch.rand(rows, nb, block, generator=g) < 0.5, -1.0, 1.0)
    k = torch.randint(-30, 31, (rows, nb, 1), generator=g).float()
    return (v * torch.exp2(k)).reshape(rows, nb * block)


def data_zero_blocks(g):
    x = torch.randn(16, 256, generator=g)
    x[0] = 0.0
    x[1, :32] = -0.0                     # a -0.0 block: torchao and we keep the sign bit
    x[2, 32:64] = 0.0
    x[3, ::3] = -0.0
    return x


DATA = {"normal": data_normal, "heavy": data_heavy, "binades": data_binades,
        "ties": data_ties, "zero_blocks": data_zero_blocks}


def near_pow2_descale(x: torch.Tensor, block: int = 32, ulps: int = 8) -> bool:
    """Does any block have fp32(amax / 6) at most `ulps` ulps above a power of two (where
    torchao 0.18's log2-based RCEIL is unreliable)?"""
    t = x.float().reshape(-1, block).abs().amax(-1) / 6.0
    mant = t.view(torch.int32) & 0x7FFFFF
    return bool(((mant > 0) & (mant <= ulps)).any())


# ----------------------------------------------------------------------------- MXFP4
@pytest.mark.parametrize("dtype", [F32, BF16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("kind", list(DATA))
@pytest.mark.parametrize("mode", list(MODES))
def test_mxfp4_matches_torchao(mode, kind, dtype):
    x = DATA[kind](_gen(list(MODES).index(mode) * 10 + list(DATA).index(kind))).to(dtype)
    if mode == "ceil":
        assert not near_pow2_descale(x), "data hits torchao's log2 weakness; change the seed"
    s_ref, d_ref = to_mx(x, torch.float4_e2m1fn_x2, 32, scaling_mode=MODES[mode])
    q = quantize(x, "mxfp4", block=(1, 32), mx_scale=mode)
    assert torch.equal(u8(q.scales), u8(s_ref))
    assert torch.equal(q.data, d_ref)


def test_mxfp4_ties_are_exercised():
    """Guard for the ties data: after scaling by 2^-k every element is an exact midpoint or
    grid point, and RNE of the midpoints is what is being compared."""
    x = data_ties(_gen(0))
    k = torch.frexp(x.reshape(16, 8, 32).abs().amax(-1))[1] - 3  # 6 * 2^k = 0.75 * 2^(k+3)
    y = (x.reshape(16, 8, 32) * torch.exp2(-k.float()).unsqueeze(-1)).abs()
    assert torch.isin(y, torch.tensor(TIES)).float().mean() > 0.4


def test_mxfp4_ceil_fp32_pow2_boundary_is_exact_where_torchao_is_not():
    """fp32 block amaxes 1..3 ulps above 6 * 2^k (and exactly 6 * 2^k) for k in [-120, 120]:
    the descale fp32(amax / 6) is 2^k * (1 + 2^-23 ..), whose exact ceil(log2) is k + 1.
    We match the exact rule on every block; torchao 0.18 (torch.log2 rounds to k) does not on
    many, and only ever by one exponent too small."""
    amaxes = []
    for k in range(-120, 121):
        base = f32_bits(6.0 * 2.0 ** k)
        amaxes += [f32_from_bits(base + j) for j in range(4)]
    g = _gen(7)
    n = len(amaxes)
    x = (torch.rand(n, 32, generator=g) * 2 - 1) * torch.tensor(amaxes).unsqueeze(1)
    x[:, 5] = -torch.tensor(amaxes)
    x = x.reshape(n // 4, 128).contiguous()
    expected = torch.tensor([exact_ceil_byte(a) for a in amaxes], dtype=torch.uint8)

    q = quantize(x, "mxfp4", block=(1, 32), mx_scale="ceil")
    assert torch.equal(u8(q.scales).flatten(), expected)

    s_ref, d_ref = to_mx(x, torch.float4_e2m1fn_x2, 32, scaling_mode=ScaleCalculationMode.RCEIL)
    s_ref = u8(s_ref).flatten()
    wrong = s_ref != expected
    assert wrong.sum() > 100                        # torchao is wrong on many exponents
    assert torch.equal(s_ref[wrong].int(), expected[wrong].int() - 1)
    assert not wrong[0::4].any()                    # exact 6 * 2^k: torchao is right
    # where the scales agree, so do the packed elements
    agree = (~wrong).reshape(n // 4, 4).repeat_interleave(16, dim=1)
    assert torch.equal(q.data[agree], d_ref[agree])


def test_mxfp4_ceil_bf16_pow2_boundary_matches_torchao():
    """bf16 amaxes one ulp above 6 * 2^k: log2 is far enough from k for torchao to be exact."""
    g = _gen(8)
    ks = torch.arange(-100, 101, dtype=F32)
    amax = (6.0 + 2.0 ** -5) * torch.exp2(ks)          # 1.5 + 2^-7: one bf16 ulp above 6
    x = (torch.rand(len(ks), 32, generator=g) * 2 - 1) * amax.unsqueeze(1)
    x[:, 0] = amax
    x = x.to(BF16)
    assert torch.equal(x[:, 0].float(), amax)
    s_ref, d_ref = to_mx(x, torch.float4_e2m1fn_x2, 32, scaling_mode=ScaleCalculationMode.RCEIL)
    q = quantize(x, "mxfp4", block=(1, 32), mx_scale="ceil")
    assert torch.equal(u8(q.scales).flatten(), (ks + 1 + 127).to(torch.uint8))
    assert torch.equal(u8(q.scales), u8(s_ref))
    assert torch.equal(q.data, d_ref)


# ----------------------------------------------------------------------------- NVFP4
def torchao_nvfp4(x):
    return nvfp4_quantize(x, 16, per_tensor_amax_to_scale(x.float().abs().amax()))


def nv_outlier(g, dtype):
    """Zero columns, one 1e4 outlier and tiny blocks: many block scales hit torchao's 2^-6
    floor (and would be E4M3 subnormal or zero in TE's arithmetic)."""
    x = torch.randn(32, 256, generator=g)
    x[:, :32] = 0.0
    x[:, 32:48] *= 1e-3
    x[:, 48:64] *= 3e-2
    x[0, 100] = 1e4
    return x.to(dtype)


def nv_negzero(g, dtype):
    x = torch.randn(16, 128, generator=g)
    x[0, :16] = -0.0                     # all -0.0 block: torchao keeps code 0x8
    x[1, ::2] = -0.0
    x[2, :16] = torch.tensor([-0.0, 0.0] * 8)
    x[3, 16:32] = -1e-30                 # underflows to -0 after scaling
    return x.to(dtype)


NV_DATA = {
    "normal": lambda g, dt: torch.randn(32, 256, generator=g).to(dt),
    "heavy": lambda g, dt: data_heavy(g).to(dt),
    "binades": lambda g, dt: (data_binades(g) * 2.0 ** -40).to(dt),
    "ties": lambda g, dt: data_ties(g, 16).to(dt),
    "outlier": nv_outlier,
    "negzero": nv_negzero,
}


@pytest.mark.parametrize("dtype", [F32, BF16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("kind", list(NV_DATA))
def test_nvfp4_torchao_order_matches_torchao(kind, dtype):
    x = NV_DATA[kind](_gen(len(kind) * 31 + (dtype == BF16)), dtype).contiguous()
    s_ref, d_ref = torchao_nvfp4(x)
    q = quantize(x, "nvfp4", block=(1, 16), order="torchao")
    assert torch.equal(u8(q.scales), u8(s_ref))
    assert torch.equal(q.data, d_ref)


def test_nvfp4_outlier_data_exercises_the_floor():
    """Guard: the outlier data has blocks whose unclamped torchao scale is below 2^-6."""
    x = nv_outlier(_gen(1), F32)
    pts = x.abs().amax() / 2688.0
    s = (x.reshape(32, -1, 16).abs().amax(-1) / 6.0) / pts
    assert ((s > 0) & (s < 2.0 ** -6)).sum() >= 32 and (s == 0).sum() >= 64


def test_nvfp4_negzero_codes():
    """-0.0 inputs become code 0x8 in torchao and in order="torchao"."""
    x = nv_negzero(_gen(2), F32)
    _, d_ref = torchao_nvfp4(x)
    q = quantize(x, "nvfp4", block=(1, 16), order="torchao")
    assert torch.equal(q.codes()[0, :16], torch.full((16,), 8, dtype=torch.uint8))
    assert torch.equal(q.codes()[2, :16], torch.tensor([8, 0] * 8, dtype=torch.uint8))
    assert torch.equal(q.data[0, :8], d_ref[0, :8])


def test_nvfp4_te_order_differs_from_torchao_on_zero_and_underflowing_blocks():
    """TE's arithmetic has no lower clamp: a zero block gets scale byte 0x00 and a tiny block
    an E4M3 subnormal scale (and codes reaching 6), where torchao clamps to 2^-6 = 0x08."""
    g = _gen(3)
    x = torch.randn(8, 64, generator=g).clamp(-3.5, 3.5)
    x[0, 0] = 4.0                          # A = 4, pts = 4 / 2688
    x[1, 16:32] = 0.0                      # zero block
    x[2, 32:48] = torch.linspace(-3e-5, 3e-5, 16)  # s = 3e-5 / 6 / pts = 0.00336: subnormal
    te = quantize(x, "nvfp4", block=(1, 16))
    ao = quantize(x, "nvfp4", block=(1, 16), order="torchao")
    s_ref, d_ref = torchao_nvfp4(x)
    assert torch.equal(u8(ao.scales), u8(s_ref)) and torch.equal(ao.data, d_ref)

    te_s, ao_s = u8(te.scales), u8(ao.scales)
    assert te_s[1, 1] == 0x00 and ao_s[1, 1] == 0x08
    assert 0x01 <= te_s[2, 2] <= 0x07 and ao_s[2, 2] == 0x08
    # TE scales the tiny block's amax to ~5.16 (-> 6); torchao's floor only to ~1.29
    te_mag, ao_mag = te.codes()[2, 32:48] & 7, ao.codes()[2, 32:48] & 7
    assert te_mag.max() == 7 and ao_mag.max() == 3   # 5.16 -> 6 vs 1.29 -> 1.5
    assert not torch.equal(te.data, d_ref)
